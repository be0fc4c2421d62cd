#!/usr/bin/env bash
# Test tool: exits at once but leaves a background child holding stdout open.
case "$1" in
  describe) echo '{"slug": "background", "description": "Leaves a child behind", "args": [
      {"name": "pidfile", "description": "where to write the child pid", "type": "string",
       "backing_type": "string", "arity": "single", "mode": "positional"}]}' ;;
  run) sleep 30 & echo "$!" > "$2"; echo "done" ;;
  *) exit 1 ;;
esac
