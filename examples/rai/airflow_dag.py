"""An hourly Airflow DAG around ``failopen rai sync``, with its exit codes mapped (docs/rai.md).

* 0: done.
* 5 (server or network failure after the client's own retries) and 143 (ended by SIGTERM: here,
  the time limit below): the task fails and Airflow retries it. The next run delivers the rest,
  exactly once.
* 6: delivered, but a key had a gap of more than 30 days: the task is skipped (amber), not
  retried, so that someone checks the tickets of the gap.
* 1 (output, state or lock file), 2 (bad arguments), 3 (credentials, or a refused key: the other
  keys were synced), 4, anything else: failed without a retry (AirflowFailException); a person
  is needed.

The sync gets SIGTERM (and then ``GRACE`` seconds) before Airflow's own execution_timeout, so it
ends with its message and ``--json`` summary. Airflow 2.4+; credentials from Airflow Variables.
"""

from __future__ import annotations

import os
import signal
import subprocess
from datetime import datetime, timedelta

from airflow.decorators import dag, task
from airflow.exceptions import AirflowException, AirflowFailException, AirflowSkipException
from airflow.models import Variable

RETRY, CHECK_GAP = {5, 143}, 6
LIMIT, GRACE = 45 * 60, 120  # seconds: SIGTERM after LIMIT, SIGKILL GRACE later
COMMAND = [
    "failopen", "rai", "sync", "--public-key", "pk_live_a", "--public-key", "pk_live_b",
    "--state", "/var/lib/failopen-rai/state.json", "--out-dir", "/var/lib/failopen-rai/out",
    "--json",
]  # fmt: skip


@dag(
    schedule="7 * * * *",
    start_date=datetime(2026, 1, 1),
    catchup=False,  # one run catches up by itself (the sync lists the API's 30-day reach)
    max_active_runs=1,
    default_args={"retries": 2, "retry_delay": timedelta(minutes=10)},
)
def failopen_rai_sync() -> None:
    @task(execution_timeout=timedelta(seconds=LIMIT + GRACE + 60))
    def sync() -> None:
        env = dict(os.environ)
        for name in ("BASE_URL", "CLIENT_ID", "CLIENT_SECRET"):
            env[f"FAILOPEN_RAI_{name}"] = Variable.get(f"failopen_rai_{name.lower()}")
        process = subprocess.Popen(COMMAND, env=env)
        try:
            code = process.wait(timeout=LIMIT)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)  # ends cleanly: exit 143, retried
            try:
                code = process.wait(timeout=GRACE)
            except subprocess.TimeoutExpired:
                process.kill()  # still safe (the state file), only without a summary
                code = process.wait()
        if code < 0:  # ended by a signal from elsewhere: report it as a shell would
            code = 128 - code
        if code == 0:
            return
        if code in RETRY:
            raise AirflowException(f"failopen rai sync: exit {code}; retried")
        if code == CHECK_GAP:
            raise AirflowSkipException("exit 6: delivered, but check the gap (see the log)")
        raise AirflowFailException(f"failopen rai sync: exit {code}; needs a person")

    sync()


failopen_rai_sync()
