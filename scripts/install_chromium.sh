#!/bin/sh
# Installs Debian's chromium for the browser tests of the HTML report, where it can: /usr/bin/chromium missing, and
# apt-get usable (present, run as root). It never fails: where chromium cannot be installed, the browser tests skip
# and say why. CHROMIUM names another binary to look for (the tests use it).
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ -x "$CHROMIUM" ]; then exit 0; fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
    echo "chromium: not installed, and apt-get is not usable here (not Debian or not root): the browser tests skip"
    exit 0
fi
echo "chromium: installing Debian's package for the browser tests of the HTML report (apt-get install -y chromium)"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q chromium >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } \
    || echo "chromium: apt-get could not install it: the browser tests skip"
exit 0
