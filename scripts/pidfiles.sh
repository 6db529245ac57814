# Processes started by the scripts, tracked by pidfile; sourced by k8s-env.sh and
# k8s-node.sh (which define `log`). Only the PID a pidfile names is ever signalled.

alive() { # pid; a zombie (exited, not yet reaped) counts as gone
  local st
  st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
  case $st in Z*) return 1 ;; esac
}

kill_pidfile() { # pidfile: SIGTERM, 10 s to exit, then SIGKILL
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f")
  if alive "$pid"; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

wait_for() { # what seconds pidfile check...: runs the check every 0.5 s while the process lives
  local what=$1 seconds=$2 pidfile=$3
  shift 3
  for _ in $(seq 1 $((seconds * 2))); do
    "$@" >/dev/null 2>&1 && return 0
    if ! alive "$(cat "$pidfile")"; then
      log "$what exited; last log lines:"; tail -n 20 "${pidfile%.pid}.log" >&2
      return 1
    fi
    sleep 0.5
  done
  log "$what not ready after ${seconds}s"; tail -n 20 "${pidfile%.pid}.log" >&2
  return 1
}
