#!/usr/bin/env bash
# Test tool: starts a grandchild (`sleep`), writes its pid to the given file, then waits.
# With --stubborn, SIGTERM is ignored (and the ignore is inherited by the grandchild), so only
# SIGKILL to the process group can end them.
case "$1" in
  describe)
    echo '{"slug": "sleeper", "description": "Sleeps for a long time", "args": [
      {"name": "pidfile", "description": "where to write the grandchild pid", "type": "string",
       "backing_type": "string", "arity": "single", "mode": "positional"},
      {"name": "stubborn", "description": "ignore SIGTERM", "type": "string",
       "backing_type": "string", "arity": "optional", "mode": "dashdashspace"}]}'
    ;;
  run)
    if [ "$3" = "--stubborn" ]; then trap '' TERM; fi
    sleep 100 &
    echo "$!" > "$2"
    echo "started"
    wait
    ;;
  *) exit 1 ;;
esac
