#!/usr/bin/env bash
# Test tool: prints binary data declared as image/png.
case "$1" in
  describe)
    echo '{"slug": "image", "description": "A tiny PNG header", "args": [],
           "output-media-type": "image/png"}' ;;
  run) printf '\x89PNG\r\n\x1a\n\x00\xff' ;;
  *) exit 1 ;;
esac
