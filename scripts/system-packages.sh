#!/bin/sh
# The two system packages `make test` needs beyond Python (`make system-packages` runs this):
#   bubblewrap  the grader's sandbox (tests/test_grading_*.py grade in it)
#   chromium    the website's browser test (tests/test_site.py)
# As root on a machine with apt-get it installs the missing ones (SYSTEM_PACKAGES=no: never).
# Otherwise, or when the install fails, it prints one line per missing package with the command
# that installs it; the tests that need the package are then skipped with that reason, and
# pytest's summary lists them. It always exits 0: a missing package costs those tests, not the run.

bwrap_found() { command -v bwrap >/dev/null 2>&1; }

# The same places tests/test_site.py looks (find_chromium).
chromium_found() {
    [ -x /usr/lib/chromium/chromium ] && return 0
    for name in chromium chromium-browser google-chrome google-chrome-stable; do
        command -v "$name" >/dev/null 2>&1 && return 0
    done
    return 1
}

# apt-get, waiting (up to 5 minutes) while another apt-get holds its lock: a second `make test`
# started at the same time, say. Its own lock timeout covers dpkg, not the package lists.
apt_get() {
    tries=0
    while :; do
        out=$(DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 "$@" 2>&1) && return 0
        case $out in
            *"Could not get lock"* | *"Unable to lock"*) ;;
            *) echo "$out"; return 1 ;;
        esac
        tries=$((tries + 1))
        [ "$tries" -ge 30 ] && { echo "$out"; return 1; }
        sleep "${APT_RETRY_SECONDS:-10}"
    done
}

missing() {
    list=""
    bwrap_found || list="$list bubblewrap"
    chromium_found || list="$list chromium"
    echo "$list"
}

todo=$(missing)
[ -z "$todo" ] && exit 0

if [ "${SYSTEM_PACKAGES:-auto}" != no ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "make: installing$todo with apt-get (SYSTEM_PACKAGES=no skips this)"
    # shellcheck disable=SC2086  # $todo is a list of package names
    if ! { apt_get update -qq && apt_get install -y -qq $todo; }; then
        echo "make: apt-get could not install$todo"
    fi
    todo=$(missing)
fi

for package in $todo; do
    case $package in
        bubblewrap) why="the grader's sandbox tests will be skipped" ;;
        chromium) why="the website's browser tests will be skipped" ;;
    esac
    echo "make: $package is not installed: $why; install it with: sudo apt-get install -y $package"
done
exit 0
