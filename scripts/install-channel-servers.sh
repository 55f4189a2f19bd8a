#!/usr/bin/env bash
# The real servers the channel tests start on 127.0.0.1, each in a virtualenv of its own in a
# cache outside the checkout (never in the project's venv):
#   mail/     aiosmtpd (SMTP) and pymap (IMAP), run together by tests/channels/mailserver.py
#   synapse/  matrix-synapse, a Matrix homeserver on SQLite (tests/channels/synapse.py)
# Versions are pinned; a stamp per venv skips a second install.
set -euo pipefail
PYTHON="${PYTHON:-python3}"
CACHE="${NIGHTOWL_CHANNEL_SERVERS:-$HOME/.cache/nightowl/channel-servers}"
MAIL="aiosmtpd==1.4.6 pymap==0.36.7"
SYNAPSE="matrix-synapse==1.163.2"

install() {  # install NAME "REQUIREMENTS"
  local venv="$CACHE/$1" stamp
  stamp="$CACHE/.installed-$1-$(echo "$2" | sha256sum | cut -c1-12)"
  [ -f "$stamp" ] && return 0
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check --upgrade pip
  # shellcheck disable=SC2086
  "$venv/bin/pip" install --quiet --disable-pip-version-check --prefer-binary $2
  touch "$stamp"
}

mkdir -p "$CACHE"
install mail "$MAIL"
install synapse "$SYNAPSE"
