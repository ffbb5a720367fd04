# One image for the compose stack's Airflow and Spark services (docker-compose.yml): Python 3.11, Debian's
# Java 17 for Spark, and this project installed with what it pins (Airflow 3.3, the Spark provider,
# pyspark 4.2.0, ...). Spark comes from the pyspark wheel: SPARK_HOME is its folder, `spark-class`,
# `spark-submit` are on PATH. Build: docker compose build (or docker build -t lakestream:local .)
FROM python:3.11-slim-bookworm

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/* \
    && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java

ENV JAVA_HOME=/opt/java \
    SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=/usr/local/bin/python \
    AIRFLOW_HOME=/opt/airflow \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

WORKDIR /opt/lakestream
# The package first (a change to dags/ or examples/ does not reinstall it); psycopg2 for Airflow's PostgreSQL.
COPY pyproject.toml README.md ./
COPY object_store ./object_store
COPY lakehouse ./lakehouse
COPY layers ./layers
COPY quality ./quality
COPY lakestream ./lakestream
COPY jobs ./jobs
RUN pip install . "psycopg2-binary>=2.9" \
    && test -x "$SPARK_HOME/bin/spark-class" && java -version

# The DAG folder (jobs/ next to it: the DAGs' default LAKESTREAM_JOBS_DIR) and the example layers project.
COPY dags ./dags
COPY examples ./examples
COPY docker/entrypoint.sh docker/healthcheck.py /usr/local/bin/

RUN chmod 755 /usr/local/bin/entrypoint.sh \
    && useradd --uid 50000 --create-home --shell /bin/bash lakestream \
    && mkdir -p /opt/airflow/logs /opt/airflow/auth /opt/spark/work \
    && chown -R lakestream /opt/airflow /opt/spark
USER lakestream

ENTRYPOINT ["/usr/local/bin/entrypoint.sh"]
CMD ["bash"]
