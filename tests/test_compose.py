"""docker-compose.yml, Dockerfile and .env.example: the compose stack's structure (read with PyYAML), validated by
`docker compose config` where a compose client is installed; the image's entrypoint and health checks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
ENV_EXAMPLE = REPO / ".env.example"

AIRFLOW = ["airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"]
SPARK = ["spark-master", "spark-worker-1", "spark-worker-2"]
PROJECT_IMAGE = ["airflow-init", *AIRFLOW, *SPARK]  # built from the Dockerfile
ONE_OFF = ["create-bucket", "airflow-init"]
SERVICES = ["minio", "create-bucket", "postgres", *PROJECT_IMAGE]
SECRETS = {"MINIO_ROOT_PASSWORD", "POSTGRES_PASSWORD", "AIRFLOW_ADMIN_PASSWORD", "AIRFLOW_JWT_SECRET"}
SECRET_NAME = re.compile(r"PASSWORD$|SECRET")  # not ..._PASSWORDS_FILE: a path
# ${VAR}, ${VAR:-default}, ${VAR-default}; not $${VAR} (escaped: the container's shell expands it)
SUBSTITUTION = re.compile(r"(?<!\$)\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}")


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict) -> dict:
    return compose["services"]


def env_example() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in ENV_EXAMPLE.read_text().splitlines() if re.match(r"[A-Z_]+=", line))
    return {k: v for k, v in pairs}


def command_text(service: dict) -> str:
    command = service.get("command", "")
    return " ".join(command) if isinstance(command, list) else command


def test_the_services(services: dict) -> None:
    assert sorted(services) == sorted(SERVICES)
    commands = {name: command_text(services[name]) for name in AIRFLOW}
    assert commands["airflow-apiserver"].startswith("airflow api-server")
    assert commands["airflow-scheduler"] == "airflow scheduler"
    assert commands["airflow-dag-processor"] == "airflow dag-processor"
    assert commands["airflow-triggerer"] == "airflow triggerer"
    assert "airflow db migrate" in command_text(services["airflow-init"])
    assert "mc mb --ignore-existing" in services["create-bucket"]["entrypoint"]
    assert services["minio"]["image"].startswith("minio/minio:")
    assert services["postgres"]["image"].startswith("postgres:")


def test_airflow_and_spark_run_one_image_built_by_the_dockerfile(services: dict) -> None:
    images = {services[name]["image"] for name in PROJECT_IMAGE}
    assert len(images) == 1, images
    for name in PROJECT_IMAGE:
        build = services[name]["build"]
        assert (REPO / build["context"]).resolve() == REPO, name
        assert (REPO / build["context"] / build["dockerfile"]).resolve() == DOCKERFILE, name


def test_every_long_running_service_has_a_health_check(services: dict) -> None:
    for name, service in services.items():
        if name in ONE_OFF:
            assert service["restart"] == "no", name
            continue
        assert service["healthcheck"]["test"][0] in ("CMD", "CMD-SHELL"), name
        assert service["restart"] == "unless-stopped", name
    # the Spark workers are healthy once the master lists them, not merely when they run
    for name in ("spark-worker-1", "spark-worker-2"):
        assert services[name]["healthcheck"]["test"][-2:] == ["spark-worker", "http://spark-master:8090"]


def test_dependencies_wait_for_health_and_the_migration(services: dict) -> None:
    for name in AIRFLOW:
        depends = services[name]["depends_on"]
        assert depends["postgres"] == {"condition": "service_healthy"}, name
        assert depends["airflow-init"] == {"condition": "service_completed_successfully"}, name
    scheduler = services["airflow-scheduler"]["depends_on"]
    assert scheduler["spark-master"] == {"condition": "service_healthy"}
    assert scheduler["create-bucket"] == {"condition": "service_completed_successfully"}
    assert services["create-bucket"]["depends_on"]["minio"] == {"condition": "service_healthy"}


def test_ports_are_on_loopback_and_do_not_clash(services: dict) -> None:
    published = {}
    for name, service in services.items():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)
            host_port = SUBSTITUTION.sub(lambda m: m.group(2) or "", port).split(":")[1]
            assert host_port not in published, (name, port, published)
            published[host_port] = name
    assert published["8080"] == "airflow-apiserver"
    master = services["spark-master"]["command"]
    assert master[master.index("--webui-port") + 1] == "8090"  # not 8080, Airflow's
    assert published["8090"] == "spark-master"
    assert {"9000", "9001"} <= published.keys()
    assert not any("7077" in p for s in services.values() for p in s.get("ports", []))  # the cluster stays inside


def test_airflow_reaches_the_spark_master_minio_and_postgres(services: dict) -> None:
    master = services["spark-master"]["command"]
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert master[master.index("--host") + 1] == "spark-master" and master[master.index("--port") + 1] == "7077"
    for name in ("spark-worker-1", "spark-worker-2"):
        assert services[name]["command"][:3] == [
            "spark-class",
            "org.apache.spark.deploy.worker.Worker",
            "spark://spark-master:7077",
        ]
    for name in AIRFLOW:
        env = services[name]["environment"]
        assert env["AIRFLOW_CONN_LAKESTREAM_SPARK"] == "spark://spark-master:7077", name
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        assert "@postgres:5432/" in env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"], name
        assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/", name
        assert env["LAKESTREAM_S3_ENDPOINT"] == "http://minio:9000", name
        assert env["LAKESTREAM_WAREHOUSE"].startswith("${LAKESTREAM_WAREHOUSE:-s3://"), name
        assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"} <= env.keys(), name
        assert env["AIRFLOW__CORE__DAGS_FOLDER"] == "/opt/lakestream/dags", name
    # same JWT secret everywhere: the scheduler signs the tasks' tokens, the api-server checks them
    assert len({services[n]["environment"]["AIRFLOW__API_AUTH__JWT_SECRET"] for n in AIRFLOW}) == 1
    # The bucket the warehouse lives in is the one create-bucket makes.
    example = env_example()
    assert example["LAKESTREAM_WAREHOUSE"].startswith(f"s3://{example['LAKESTREAM_BUCKET']}/")


def test_credentials_come_from_env_with_the_example_s_defaults() -> None:
    text = COMPOSE_FILE.read_text()
    example = env_example()
    used = {m.group(1): m.group(2) for m in SUBSTITUTION.finditer(text)}
    assert used.keys() == example.keys(), "every variable of docker-compose.yml, and only those, in .env.example"
    for m in SUBSTITUTION.finditer(text):
        name, default = m.group(1), m.group(2)
        assert default is not None, f"${{{name}}} without a default: the stack would not start without .env"
        assert default == example[name], (name, default, example[name])
    # No secret written inline: outside the substitutions, no secret's value appears.
    outside = SUBSTITUTION.sub("", text)
    secrets = {k: v for k, v in example.items() if SECRET_NAME.search(k)}
    assert {
        "MINIO_ROOT_PASSWORD",
        "POSTGRES_PASSWORD",
        "AIRFLOW_ADMIN_PASSWORD",
        "AIRFLOW_JWT_SECRET",
    } <= secrets.keys()
    for name, value in secrets.items():
        assert value and value not in outside, f"{name}'s value is written inline in docker-compose.yml"
    # and every environment entry named like a secret is a substitution (or the container's own $$VAR)
    compose = yaml.safe_load(text)
    for service in compose["services"].values():
        for key, value in (service.get("environment") or {}).items():
            if SECRET_NAME.search(key):
                assert SUBSTITUTION.fullmatch(str(value)), (key, value)


def test_the_dockerfile_builds_python_3_11_with_java_17_and_the_project() -> None:
    text = DOCKERFILE.read_text()
    instructions = [line.split(None, 1) for line in re.sub(r"\\\n", " ", text).splitlines() if line and line[0] != "#"]
    assert [i[1] for i in instructions if i[0] == "FROM"] == ["python:3.11-slim-bookworm"]
    run = " ".join(i[1] for i in instructions if i[0] == "RUN")
    assert re.search(r"apt-get install [^&]*openjdk-17-jre-headless", run)
    assert re.search(r"pip install \.(\s|$)", run)  # the project, with the versions pyproject.toml pins
    copies = {i[1].split()[0] for i in instructions if i[0] == "COPY"}
    import tomllib

    packages = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    for package in packages:  # every package pip installs is copied in before `pip install .`
        assert package.rstrip("*") in copies, package
    assert {"pyproject.toml", "dags", "examples"} <= copies
    env = " ".join(i[1] for i in instructions if i[0] == "ENV")
    assert "SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark" in env
    assert "JAVA_HOME=" in env
    assert any(i == ["ENTRYPOINT", '["/usr/local/bin/entrypoint.sh"]'] for i in instructions)


@pytest.mark.subprocess
def test_the_entrypoint_binds_spark_to_the_container_address_unless_set(tmp_path: Path) -> None:
    env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    entrypoint = str(REPO / "docker" / "entrypoint.sh")
    out = subprocess.run([entrypoint, "sh", "-c", 'echo "$SPARK_LOCAL_IP"'], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert re.fullmatch(r"\d+\.\d+\.\d+\.\d+\n", out.stdout), out.stdout
    env["SPARK_LOCAL_IP"] = "10.1.2.3"
    out = subprocess.run([entrypoint, "sh", "-c", 'echo "$SPARK_LOCAL_IP"'], env=env, capture_output=True, text=True)
    assert out.stdout == "10.1.2.3\n"


@pytest.mark.subprocess
def test_the_spark_worker_health_check_needs_the_master_to_list_it_alive() -> None:
    workers: list[dict] = []

    class Master(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = json.dumps({"workers": workers}).encode()
            self.send_response(200 if self.path == "/json/" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Master)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    check = [sys.executable, str(REPO / "docker" / "healthcheck.py")]
    env = {**os.environ, "SPARK_LOCAL_IP": "10.0.0.7"}
    try:
        assert subprocess.run([*check, "spark-worker", url], env=env, capture_output=True).returncode == 1
        workers.append({"host": "10.0.0.7", "state": "DEAD"})
        workers.append({"host": "10.0.0.8", "state": "ALIVE"})
        assert subprocess.run([*check, "spark-worker", url], env=env, capture_output=True).returncode == 1
        workers.append({"host": "10.0.0.7", "state": "ALIVE"})
        assert subprocess.run([*check, "spark-worker", url], env=env, capture_output=True).returncode == 0
        assert subprocess.run([*check, "http", url + "/json/"], capture_output=True).returncode == 0
        assert subprocess.run([*check, "http", url + "/nope"], capture_output=True).returncode != 0
    finally:
        server.shutdown()


def compose_client() -> list[str] | None:
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True).returncode == 0:
        return [docker, "compose"]
    if shutil.which("docker-compose"):
        return [shutil.which("docker-compose")]
    return None


@pytest.mark.subprocess
def test_docker_compose_config_accepts_it(tmp_path: Path) -> None:
    client = compose_client()
    if client is None:
        pytest.skip("no compose client on PATH (neither `docker compose` nor `docker-compose`): structure checked only")
    # No .env: the defaults; then a variable from the environment wins.
    env = {k: v for k, v in os.environ.items() if k not in env_example()}
    base = [*client, "--project-directory", str(REPO), "-f", str(COMPOSE_FILE)]
    proc = subprocess.run([*base, "config"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    resolved = yaml.safe_load(proc.stdout)["services"]
    assert resolved["airflow-scheduler"]["environment"]["AWS_SECRET_ACCESS_KEY"] == "lakestream-local-secret"
    env["MINIO_ROOT_PASSWORD"] = "from-the-environment"
    proc = subprocess.run([*base, "config"], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    resolved = yaml.safe_load(proc.stdout)["services"]
    assert resolved["airflow-scheduler"]["environment"]["AWS_SECRET_ACCESS_KEY"] == "from-the-environment"
    assert resolved["minio"]["environment"]["MINIO_ROOT_PASSWORD"] == "from-the-environment"
