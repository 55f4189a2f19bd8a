#!/usr/bin/env bash
# Debian packages nightowl uses at run time: the sandbox (bubblewrap, slirp4netns, runsc for
# the gVisor backend, the system Python its supervisor runs on), the desktop (Xvfb, xdotool,
# ImageMagick, x11vnc, noVNC) and the browser (Chromium; none can be downloaded at run time).
set -euo pipefail
PACKAGES=(chromium bubblewrap slirp4netns nftables runsc python3-minimal util-linux procps iproute2
  xvfb x11-utils xdotool imagemagick x11vnc novnc xterm)
missing=()
for package in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "Missing Debian packages: ${missing[*]} (install them as root; 'nightowl doctor' says what each is for)." >&2
  exit 1
fi
echo "Installing Debian packages: ${missing[*]}"
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1 || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}
