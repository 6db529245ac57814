#!/usr/bin/env python3
"""Summarises the kube-apiserver CPU profiles the benchmark writes (`--apiserver-profile`),
on machines without Go's `go tool pprof`: gzipped profile.proto, read with the standard
library only.

  pprof-summary.py top FILE [N] [--cum] [--match REGEX]
      CPU seconds by function: flat (the sampled function itself) or cumulative.
  pprof-summary.py diff BASE FILE [N] [--cum] [--match REGEX]
      FILE - BASE by function, largest differences first.
  pprof-summary.py requests FILE...
      CPU seconds by what the apiserver was doing: a handler by verb (create, update,
      patch, delete, get, list and watch), decoding its etcd watch (watchChan), its watch
      cache (cacher), the Go runtime's background GC; `gc assist` is the part of each
      spent helping the GC, which grows with what it allocates.
"""
import collections
import gzip
import re
import sys


def varint(b, i):
    result = shift = 0
    while True:
        c = b[i]
        i += 1
        result |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return result, i


def fields(b):
    """(field number, wire type, value) of each field of a protobuf message."""
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(b, i)
        elif wire == 2:
            n, i = varint(b, i)
            value = b[i : i + n]
            i += n
        elif wire == 1:
            value, i = b[i : i + 8], i + 8
        elif wire == 5:
            value, i = b[i : i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def repeated_ints(wire, value):
    if wire == 0:
        return [value]
    out, i = [], 0
    while i < len(value):
        x, i = varint(value, i)
        out.append(x)
    return out


class Profile:
    """The samples of a CPU profile as stacks of function names (leaf first) and CPU ns."""

    def __init__(self, path):
        data = gzip.open(path).read()
        strings, samples, locations, functions = [], [], {}, {}
        self.duration = 0
        for number, wire, value in fields(data):
            if number == 2:  # Sample: location ids, values
                ids, values = [], []
                for n, w, v in fields(value):
                    if n == 1:
                        ids += repeated_ints(w, v)
                    elif n == 2:
                        values += repeated_ints(w, v)
                samples.append((ids, values))
            elif number == 4:  # Location: id, lines (innermost first)
                lid, funcs = 0, []
                for n, w, v in fields(value):
                    if n == 1:
                        lid = v
                    elif n == 4:
                        funcs += [fv for fn, _, fv in fields(v) if fn == 1]
                locations[lid] = funcs
            elif number == 5:  # Function: id, name
                fid = name = 0
                for n, w, v in fields(value):
                    if n == 1:
                        fid = v
                    elif n == 2:
                        name = v
                functions[fid] = name
            elif number == 6:
                strings.append(value.decode())
            elif number == 10:
                self.duration = value
        names = {fid: strings[i] for fid, i in functions.items()}
        # The last value of a CPU profile's sample is its CPU time in nanoseconds.
        self.stacks = [
            ([names[f] for lid in ids for f in locations.get(lid, [])], values[-1])
            for ids, values in samples
        ]
        self.total = sum(ns for _, ns in self.stacks)

    def by_function(self, cumulative):
        out = collections.Counter()
        for stack, ns in self.stacks:
            for name in set(stack) if cumulative else stack[:1]:
                out[name] += ns
        return out


# What the apiserver was doing, by the outermost frame that names it.
ACTIVITIES = [
    ("create", r"handlers\.createHandler"),
    ("update", r"handlers\.UpdateResource"),
    ("patch", r"handlers\.PatchResource"),
    ("delete", r"handlers\.(DeleteResource|DeleteCollection)"),
    ("get", r"handlers\.GetResource"),
    ("list and watch", r"handlers\.ListResource"),
    ("etcd watch (watchChan)", r"etcd3\.\(\*watchChan\)"),
    ("watch cache (cacher)", r"cacher\."),
    ("background GC", r"runtime\.(gcBgMarkWorker|bgsweep|bgscavenge)"),
]


def activity(stack):
    for frame in reversed(stack):
        for name, pattern in ACTIVITIES:
            if re.search(pattern, frame):
                return name
    return "other (HTTP, TLS, etcd client, ...)"


def requests(paths):
    rows = []
    for path in paths:
        p = Profile(path)
        spent, assist = collections.Counter(), collections.Counter()
        for stack, ns in p.stacks:
            a = activity(stack)
            spent[a] += ns
            if any(f.startswith("runtime.gcAssist") for f in stack):
                assist[a] += ns
        rows.append((path, p.total, spent, assist))
    names = [n for n, _ in ACTIVITIES] + ["other (HTTP, TLS, etcd client, ...)"]
    print("CPU seconds (of which gc assist)")
    print(f"{'':32}" + "".join(f"{r[0].rsplit('/', 1)[-1][:22]:>24}" for r in rows))
    print(f"{'total':32}" + "".join(f"{r[1] / 1e9:24.2f}" for r in rows))
    for n in names:
        cells = "".join(
            f"{r[2][n] / 1e9:17.2f} ({r[3][n] / 1e9:4.2f})" for r in rows
        )
        print(f"{n:32}{cells}")


def main(argv):
    cumulative = "--cum" in argv
    argv = [a for a in argv if a != "--cum"]
    pattern = None
    if "--match" in argv:
        k = argv.index("--match")
        pattern = re.compile(argv[k + 1])
        del argv[k : k + 2]
    keep = lambda name: pattern is None or pattern.search(name)
    if not argv:
        sys.exit(__doc__)
    command, rest = argv[0], argv[1:]
    if command == "top":
        p = Profile(rest[0])
        n = int(rest[1]) if len(rest) > 1 else 30
        print(f"total {p.total / 1e9:.2f} s CPU over {p.duration / 1e9:.0f} s")
        rows = [(k, v) for k, v in p.by_function(cumulative).most_common() if keep(k)]
        for name, ns in rows[:n]:
            print(f"{ns / 1e9:9.3f}  {name}")
    elif command == "diff":
        base, other = Profile(rest[0]), Profile(rest[1])
        n = int(rest[2]) if len(rest) > 2 else 30
        print(f"base {base.total / 1e9:.2f} s, file {other.total / 1e9:.2f} s, "
              f"difference {(other.total - base.total) / 1e9:+.2f} s")
        b, f = base.by_function(cumulative), other.by_function(cumulative)
        diff = {k: f[k] - b[k] for k in set(b) | set(f) if keep(k)}
        for name, d in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:n]:
            print(f"{d / 1e9:+9.3f}  {b[name] / 1e9:8.3f} -> {f[name] / 1e9:8.3f}  {name}")
    elif command == "requests":
        requests(rest)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
