#!/bin/bash
# hyapp-probe URL: exits 0 when `GET URL` (http://host:port/path) answers
# 200, for compose healthchecks. Bash's /dev/tcp does the request, so the
# images need no curl (the production image holds the services and their
# libraries only).
set -eu
rest=${1#http://}
authority=${rest%%/*}
path=/${rest#*/}
[ "$authority" = "$rest" ] && path=/
exec 3<>"/dev/tcp/${authority%%:*}/${authority##*:}"
printf 'GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n' "$path" "$authority" >&3
IFS= read -r -t 3 status <&3
case $status in
  "HTTP/1."?" 200 "*) exit 0 ;;
  *) exit 1 ;;
esac
