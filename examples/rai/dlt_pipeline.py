"""Interface A into any dlt destination. In the clone: ``pip install -e ".[dlt]" "dlt[duckdb]"``,
then ``python examples/rai/dlt_pipeline.py`` with FAILOPEN_RAI_BASE_URL, FAILOPEN_RAI_CLIENT_ID,
FAILOPEN_RAI_CLIENT_SECRET and FAILOPEN_RAI_PUBLIC_KEYS (comma-separated) set.

Run it every hour (cron, Airflow): each run loads the cohorts not loaded before, with their
sessions, into the tables ``cohorts`` and ``sessions``. Swap ``destination`` for "snowflake",
"bigquery", "postgres" or "filesystem" (S3 + Parquet) with the matching dlt extra.
"""

from __future__ import annotations

import os

import dlt

from failopen.rai import Client
from failopen.rai.dlt import rai_source


def main() -> None:
    keys = [k for k in os.environ["FAILOPEN_RAI_PUBLIC_KEYS"].split(",") if k]
    with Client(
        os.environ["FAILOPEN_RAI_BASE_URL"],
        os.environ["FAILOPEN_RAI_CLIENT_ID"],
        os.environ["FAILOPEN_RAI_CLIENT_SECRET"],
    ) as client:
        pipeline = dlt.pipeline(
            pipeline_name="failopen_rai", destination="duckdb", dataset_name="rai_data"
        )
        # Raises PipelineStepFailed on failure: a scheduler retries the task, and dlt first
        # finishes the package a failed load left (its state with it), so nothing loads twice.
        print(pipeline.run(rai_source(client, keys)))


if __name__ == "__main__":
    main()
