#!/bin/sh
# One hourly run of failopen rai sync for cron (examples/rai/crontab), exit codes mapped.
# RAI_ENV_FILE and RAI_HOME default to the paths in the crontab's comments.
set -u
. "${RAI_ENV_FILE:-/etc/failopen/rai.env}"
cd "${RAI_HOME:-/var/lib/failopen-rai}" || exit 1
run() {
    timeout --preserve-status -s TERM -k 120 45m failopen rai sync --public-key pk_live_a \
        --state state.json --out-dir out --json >>sync.jsonl
}
run; rc=$?
case $rc in
    0) ;;
    5|143) sleep 600; run; rc=$?
        [ "$rc" -eq 0 ] || logger -p user.err -t failopen-rai "exit $rc after one retry" ;;
    6) logger -p user.warning -t failopen-rai "exit 6: delivered; check the gap (sync.jsonl)" ;;
    *) logger -p user.err -t failopen-rai "exit $rc: needs a person (docs/rai.md, Exit codes)" ;;
esac
exit $rc
