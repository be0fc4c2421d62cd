#!/usr/bin/env bash
# Test tool: starts `sleep 3000` in the background, writes its pid to the given file and exits.
# --how: `quiet` (the child's output goes to /dev/null), `stubborn` (quiet, and SIGTERM ignored,
# so only SIGKILL ends it), `holding` (the child keeps stdout open), `setsid` (the child leaves
# the process group on purpose, as a daemon would, before the tool exits).
case "$1" in
  describe) echo '{"slug": "leaves-behind", "description": "Leaves a child behind", "args": [
      {"name": "pidfile", "description": "where to write the child pid", "type": "string",
       "backing_type": "string", "arity": "single", "mode": "positional"},
      {"name": "how", "description": "quiet, stubborn, holding or setsid", "type": "string",
       "backing_type": "string", "arity": "single", "mode": "dashdashspace"}]}' ;;
  run)
    case "$4" in
      quiet) sleep 3000 >/dev/null 2>&1 & ;;
      stubborn) trap '' TERM; sleep 3000 >/dev/null 2>&1 & ;;
      holding) sleep 3000 & ;;
      setsid)
        setsid sleep 3000 >/dev/null 2>&1 </dev/null &
        # `setsid cmd &` returns before the child has left the group: wait until it leads its
        # own session, or the end of the call could still catch it.
        until [ "$(cut -d' ' -f6 "/proc/$!/stat")" = "$!" ]; do sleep 0.01; done ;;
      *) exit 2 ;;
    esac
    echo "$!" > "$2"
    echo "done" ;;
  *) exit 1 ;;
esac
