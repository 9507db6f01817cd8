#!/bin/sh
# A webhook as a CGI script (busybox httpd, lighttpd, nginx with fcgiwrap...): each request to
# .../deploy-hook.cgi?service=NAME submits `$DEPLOY NAME` to a running `lanes serve`. Deploys of
# one service run one at a time and in order; those of different services run at once, under
# the server's cap. The HTTP answer carries lanes' own answer (started, queued with how many
# ahead, coalesced, failed to start, rejected or closed) as JSON.
#
# The web server runs as the user of `lanes serve` (another uid is refused), and LANES_SOCKET
# names the socket (a CGI environment has no XDG_RUNTIME_DIR):
#
#   export LANES_SOCKET=$HOME/.lanes.sock DEPLOY=/srv/deploy.sh
#   lanes serve -j 4 --report deploys.jsonl &
#   busybox httpd -f -p 127.0.0.1:8080 -h /srv/www    # this file in /srv/www/cgi-bin/
#   curl -X POST 'http://127.0.0.1:8080/cgi-bin/deploy-hook.cgi?service=api'
set -u
LANES=${LANES:-lanes}
# Only a plain name: the key and the argument come from the request.
service=$(printf '%s\n' "${QUERY_STRING:-}" |
  sed -n 's/^\(.*&\)\{0,1\}service=\([A-Za-z0-9_-]\{1,64\}\)\(&.*\)\{0,1\}$/\2/p')
if [ -z "$service" ]; then
  printf 'Status: 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nservice=NAME expected\n'
  exit 0
fi
# A server that does not answer (stopped) is not waited for longer than the web server would.
answer=$(timeout 10 "$LANES" submit --json "deploy-$service" -- "${DEPLOY:-./deploy.sh}" "$service")
case $? in
  0 | 10 | 11) printf 'Status: 202 Accepted\r\n' ;;     # started, queued, coalesced
  12 | 13) printf 'Status: 503 Service Unavailable\r\n' ;; # rejected (queue full), closed
  *) printf 'Status: 500 Internal Server Error\r\n' ;;  # failed to start (1), no server (2), no answer (124)
esac
printf 'Content-Type: application/json\r\n\r\n%s\n' "$answer"
