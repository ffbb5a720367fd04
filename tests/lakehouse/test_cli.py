from __future__ import annotations

from typer.testing import CliRunner

from lakehouse.cli import app

runner = CliRunner()


def test_demo_runs_and_checks_itself(tmp_path) -> None:
    result = runner.invoke(app, ["demo", "--warehouse", str(tmp_path / "wh"), "--big-mib", "12"])
    assert result.exit_code == 0, result.output
    assert "exactly one winner each round" in result.output and "none lost" in result.output


def test_store_probe_and_ls(tmp_path) -> None:
    wh = tmp_path.as_uri()
    assert runner.invoke(app, ["store", "probe", "-w", wh]).exit_code == 0
    (tmp_path / "x").write_bytes(b"abc")
    result = runner.invoke(app, ["store", "ls", "-w", wh])
    assert result.exit_code == 0 and "x" in result.output


def test_store_probe_against_s3(seaweedfs) -> None:
    env = {
        "LAKESTREAM_S3_ENDPOINT": seaweedfs.endpoint_url,
        "AWS_ACCESS_KEY_ID": seaweedfs.store_options()["access_key_id"],
        "AWS_SECRET_ACCESS_KEY": seaweedfs.store_options()["secret_access_key"],
    }
    result = runner.invoke(app, ["store", "probe", "-w", f"s3://{seaweedfs.bucket}/cli"], env=env)
    assert result.exit_code == 0, result.output
    env["AWS_SECRET_ACCESS_KEY"] = "wrong-secret-xyz"
    result = runner.invoke(app, ["store", "probe", "-w", f"s3://{seaweedfs.bucket}/cli"], env=env)
    assert result.exit_code == 1 and "refused our credentials" in result.output
    assert "wrong-secret-xyz" not in result.output


def test_errors_are_clear_and_exit_non_zero() -> None:
    result = runner.invoke(app, ["store", "ls", "-w", "ftp://nope/x"])
    assert result.exit_code == 1 and "unsupported warehouse URL" in result.output
