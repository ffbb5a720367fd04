#!/bin/sh
# The compose image's entrypoint. A Spark driver (spark-submit in the Airflow scheduler) and the workers must
# reach each other across containers: bind Spark to this container's address unless SPARK_LOCAL_IP is set (the
# DAGs otherwise default it to 127.0.0.1, which only works when everything runs on one host).
if [ -z "${SPARK_LOCAL_IP:-}" ]; then
    SPARK_LOCAL_IP="$(python -c 'import socket; print(socket.gethostbyname(socket.gethostname()))')"
    export SPARK_LOCAL_IP
fi
exec "$@"
