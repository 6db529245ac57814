# syntax=docker/dockerfile:1
# midonet-kube-controllers: a static (musl) binary on distroless/static.
#
#   docker build -t midonet/midonet-kube-controllers:latest .
#
# The build stage uses BuildKit cache mounts for the cargo registry and target directory
# (the default builder since Docker 23).
#
# Without Docker or a registry, scripts/image.sh builds the same image contents (user,
# entrypoint, command, port) with buildah FROM scratch from a local build (a glibc binary
# with its libraries); docs/operations.md, "Container image", says what differs.

ARG RUST_VERSION=1.95

FROM rust:${RUST_VERSION}-bookworm AS build
# musl-gcc compiles ring's C and assembly parts for the musl target.
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl-tools \
    && rm -rf /var/lib/apt/lists/* \
    && rustup target add x86_64-unknown-linux-musl
ENV CC_x86_64_unknown_linux_musl=musl-gcc
WORKDIR /src
COPY . .
# The target directory is a cache mount, so the binary is copied out in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --profile dist --locked --target x86_64-unknown-linux-musl \
        --bin midonet-kube-controllers \
    && cp target/x86_64-unknown-linux-musl/dist/midonet-kube-controllers /midonet-kube-controllers

# distroless/static: CA certificates, /etc/passwd with the nonroot user (65532), no shell.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /midonet-kube-controllers /midonet-kube-controllers
USER 65532:65532
# Metrics, /healthz and /readyz.
EXPOSE 9453
ENTRYPOINT ["/midonet-kube-controllers"]
CMD ["run"]
