"""deploy/prometheus and deploy/grafana: generated from code and current, checked and
unit-tested by promtool (Debian's prometheus package, installed by make test), and
consistent with each other and with the served models."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kyc_testing import PROJECT_ROOT, SHIPPED_REPOSITORY
from kyc_tools.cli import main
from kyc_tools.ops import dashboard, prometheus
from kyc_tools.ops.models import served_models
from kyc_tools.ops.render import ADAPTER, DASHBOARD, RULES, render
from kyc_tools.repo.graph.build import build_graph
from kyc_tools.repo.graph.derive import step_map

DEPLOY = PROJECT_ROOT / "deploy"
PROM = DEPLOY / "prometheus"


def promtool(*args: str, cwd: Path = PROM) -> subprocess.CompletedProcess:
    tool = shutil.which("promtool")
    assert tool, "promtool is needed (Debian package prometheus; make test installs it)"
    return subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True)


def rules() -> list[dict]:
    groups = yaml.safe_load((DEPLOY / RULES).read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_the_committed_files_are_what_kyc_deploy_render_writes(capsys):
    assert render(SHIPPED_REPOSITORY, DEPLOY, check=True) == []
    assert main(["deploy", "render", "--check", "--model-repository", str(SHIPPED_REPOSITORY),
                 "--out", str(DEPLOY)]) == 0


def test_render_check_names_a_stale_file_and_render_mends_it(tmp_path, capsys):
    shutil.copytree(DEPLOY, tmp_path / "deploy")
    stale = tmp_path / "deploy" / DASHBOARD
    stale.write_text(stale.read_text().replace("Requests per second", "Hand-edited"))
    args = ["deploy", "render", "--model-repository", str(SHIPPED_REPOSITORY),
            "--out", str(tmp_path / "deploy")]
    assert main([*args, "--check"]) == 1
    assert f"out of date: {stale}" in capsys.readouterr().err
    assert main(args) == 0 and main([*args, "--check"]) == 0


def test_promtool_checks_the_rules_with_lint_fatal():
    result = promtool("check", "rules", "--lint=all", "--lint-fatal", str(RULES.name))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules())} rules found" in result.stdout


def test_promtool_unit_tests_of_the_alerts_and_recording_rules_pass():
    result = promtool("test", "rules", "tests/alerts.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_promtool_fails_an_alert_test_whose_expectation_is_wrong(tmp_path):
    shutil.copytree(PROM, tmp_path / "prometheus")
    test = tmp_path / "prometheus" / "tests" / "alerts.test.yml"
    test.write_text(test.read_text().replace("value: 30000", "value: 31000"))
    result = promtool("test", "rules", "tests/alerts.test.yml", cwd=tmp_path / "prometheus")
    assert result.returncode == 1 and "kyc:pod_queue_us_per_request:rate2m" in result.stderr


def test_every_alert_is_shown_firing_in_the_unit_tests():
    tests = yaml.safe_load((PROM / "tests" / "alerts.test.yml").read_text())["tests"]
    fired = {case["alertname"] for group in tests for case in group.get("alert_rule_test", [])
             if case.get("exp_alerts")}
    assert fired == {rule["alert"] for rule in rules() if "alert" in rule}


def test_the_scrape_config_passes_promtool_with_static_targets_in_place_of_kubernetes(tmp_path):
    """Debian's Prometheus is built without Kubernetes discovery, so promtool checks the
    config with that one block swapped for a static target; the rest (relabelling,
    rule files) is checked as shipped."""
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    ports = {prometheus.JOB: ("metrics", 8002), prometheus.REPOSITORY_JOB: ("repo-status", 8003)}
    assert jobs.keys() == ports.keys()
    for name, (port_name, port) in ports.items():
        job = jobs[name]
        assert job.pop("kubernetes_sd_configs") == [{"role": "pod"}]
        job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
        relabelled = {r.get("target_label") for r in job["relabel_configs"]}
        assert {"namespace", "pod"} <= relabelled  # what every rule and the adapter group by
        kept = [r for r in job["relabel_configs"] if r.get("action") == "keep"]
        assert {r["regex"] for r in kept} == {"kyc-triton", "server", port_name}
    shutil.copy(PROM / "rules.yml", tmp_path / "rules.yml")
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = promtool("check", "config", "prometheus.yml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_model_has_a_not_ready_alert_and_a_budget_where_kyc_budgets_gives_one():
    models = served_models(SHIPPED_REPOSITORY)
    steps = step_map(build_graph(SHIPPED_REPOSITORY))  # derived (kyc.budgets.StepMap)
    not_ready = {r["labels"]["model"] for r in rules() if r.get("alert") == "KycModelNotReady"}
    assert not_ready == {m.name for m in models} and len(models) == 16
    (budget,) = [r["expr"] for r in rules() if r.get("record") == "kyc:queue_budget_us"]
    found = re.findall(r'vector\((\d+)\), "model", "(\w+)"', budget)
    assert {model: int(value) for value, model in found} == {
        m.name: int(steps.queue_cap_us(m.name)) for m in models
        if steps.queue_cap_us(m.name) is not None}
    assert len(found) == len(models) - 2  # all but the two ensembles


def test_the_autoscaler_signal_leaves_out_ensembles_and_the_sequence_model():
    (signal,) = [r["expr"] for r in rules() if r.get("record") == prometheus.POD_QUEUE_RULE]
    counted = set(re.search(r'model=~"([^"]+)"', signal).group(1).split("|"))
    assert {"kyc_ensemble", "document_ocr", "liveness_sequence"}.isdisjoint(counted)
    assert {"face_preprocess", "face_embedding", "ocr_rec", "antifraud"} <= counted
    adapter = yaml.safe_load((DEPLOY / ADAPTER).read_text())
    assert adapter == prometheus.adapter_rules()
    assert prometheus.POD_QUEUE_RULE in adapter["rules"][0]["seriesQuery"]


def test_the_dashboard_reads_only_series_that_triton_kyc_or_the_rules_provide():
    recorded = {r["record"] for r in rules() if "record" in r}
    for expr in dashboard.expressions():
        names = set(re.findall(r"\b([a-z_]+:[a-z0-9_:]+|nv_[a-z_]+|up)\b(?=\{)", expr))
        assert names, expr
        for name in names:
            assert name in recorded or name.startswith("nv_inference_") or name == "up", name


def test_the_dashboard_is_a_grafana_dashboard_without_overlaps_or_duplicate_ids():
    board = json.loads((DEPLOY / DASHBOARD).read_text())
    assert board == dashboard.dashboard()
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels) >= 10
    cells = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        cell = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"])
                for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not cells & cell, panel["title"]
        cells |= cell
        refs = [t["refId"] for t in panel["targets"]]
        assert len(set(refs)) == len(refs) and all(t["expr"] for t in panel["targets"])
    names = [v["name"] for v in board["templating"]["list"]]
    assert names == ["datasource", "namespace", "model"]
    titles = " ".join(p["title"].lower() for p in panels)
    for topic in ("requests per second", "latency", "queue vs compute", "batch size",
                  "failure", "liveness sessions"):
        assert topic in titles, topic


@pytest.mark.parametrize("rule_name", ["KycModelFailureRatioHigh", "KycQueueTimeOverBudget",
                                       "KycModelDropRefused"])
def test_alerts_say_what_to_look_at(rule_name):
    (rule,) = [r for r in rules() if r.get("alert") == rule_name]
    assert rule["labels"]["severity"] in {"warning", "page"}
    assert "{{ $labels.model }}" in rule["annotations"]["summary"]


def test_every_rule_reads_the_job_of_the_port_that_serves_its_series():
    """Triton's series (8002) and the repository watcher's (8003) come from two jobs:
    up{} stays one series per pod in kyc-triton, and no rule mixes the two."""
    for rule in rules():
        if "kyc_repository_" in rule["expr"]:
            assert "nv_inference_" not in rule["expr"] and "up{" not in rule["expr"], rule
        if "up{" in rule["expr"]:
            assert f'up{{job="{prometheus.JOB}"}}' in rule["expr"], rule


def test_a_refused_drop_alerts_on_its_first_refusal_too():
    """prometheus_client exports a model's refusal counter from its first refusal on,
    at 1: increase() alone never sees it (the promtool tests show both cases)."""
    (rule,) = [r for r in rules() if r.get("alert") == "KycModelDropRefused"]
    assert "increase(kyc_repository_refusals_total[10m]) > 0" in rule["expr"]
    assert ("kyc_repository_refusals_total unless kyc_repository_refusals_total offset 10m"
            in rule["expr"])
    assert rule["labels"]["severity"] == "warning"
    assert "kyc repo status" in rule["annotations"]["description"]
    not_ready = [r for r in rules() if r.get("alert") == "KycModelNotReady"]
    assert not any("strict readiness" in r["annotations"]["description"] for r in not_ready)
    # the watcher's own registry: no series before a refusal, then one at 1, by stage
    from prometheus_client import generate_latest

    from kyc_tools.operator.live import Event
    from kyc_tools.operator.watcher import RepositoryMetrics

    metrics = RepositoryMetrics()
    assert "kyc_repository_refusals_total{" not in generate_latest(metrics.registry).decode()
    metrics.count(Event("load_refused", "face_embedding", 2, reason="bad"))
    assert ('kyc_repository_refusals_total{model="face_embedding",stage="load"} 1.0'
            in generate_latest(metrics.registry).decode())
