"""The Grafana dashboard of the KYC Triton servers, built here and rendered to
``deploy/grafana/kyc-triton.json`` by ``kyc deploy render`` (never edited by hand).

It reads the recording rules of :mod:`kyc_tools.ops.prometheus` where one exists, so the
dashboard, the alerts and the autoscaler look at the same numbers. Variables:
``datasource`` (a Prometheus), ``namespace`` and ``model`` (multi-value, All).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kyc_tools.ops.prometheus import JOB, POD_QUEUE_RULE, WINDOW

UID = "kyc-triton"
TITLE = "KYC on Triton"
SCHEMA_VERSION = 39
NS = 'namespace=~"$namespace"'
SEL = f'{NS}, model=~"$model"'
WIDTH = 12  # two panels a row (Grafana's grid is 24 wide)
HEIGHT = 8


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    targets: tuple[tuple[str, str], ...]  # (PromQL, legend)
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict)


def _per_model(series: str, legend: str = "{{model}}") -> tuple[str, str]:
    """A target: ``series`` of the chosen namespaces and models."""
    return f"{series}{{{SEL}}}", legend


def _per_namespace(series: str, legend: str) -> tuple[str, str]:
    """A target: ``series`` of the chosen namespaces."""
    return f"{series}{{{NS}}}", legend


def panels() -> list[Panel]:
    """What the dashboard shows, top to bottom, two a row."""
    w = WINDOW
    quantiles = tuple(
        (f'max by (model) (nv_inference_request_summary_us{{{SEL}, quantile="{q}"}})',
         f"{{{{model}}}} p{label}")
        for q, label in (("0.5", "50"), ("0.95", "95"), ("0.99", "99")))
    return [
        Panel("Requests per second", "reqps", (_per_model(f"kyc:request_rate:rate{w}"),),
              "Successful and failed requests per model, all servers."),
        Panel("Failure ratio", "percentunit", (_per_model(f"kyc:failure_ratio:rate{w}"),),
              "Alerts: KycModelFailureRatioHigh (5%) and KycModelFailureRatioCritical (25%)."),
        Panel("Latency percentiles (worst server)", "µs", quantiles,
              "Triton's request summaries; a quantile cannot be merged across servers, "
              "so this is the worst server's."),
        Panel("Failures per second by reason", "reqps",
              (_per_model(f"kyc:request_failure_rate:rate{w}", "{{model}} {{reason}}"),),
              "Triton's reasons: REJECTED (queue policy or a full queue), CANCELED, "
              "BACKEND (the model said no, e.g. bad input), OTHER."),
        Panel("Queue vs compute time per request", "µs",
              (_per_model(f"kyc:queue_us_per_request:rate{w}", "{{model}} queue"),
               _per_model(f"kyc:compute_us_per_request:rate{w}", "{{model}} compute")),
              "Mean per request over the rate window. An ensemble's own queue time is "
              "about zero: its steps' queues are theirs."),
        Panel("p95 queue time vs budget", "µs",
              (_per_model("kyc:queue_us_p95:max", "{{model}} p95"),
               ('kyc:queue_budget_us{model=~"$model"}', "{{model}} budget")),
              "Alert KycQueueTimeOverBudget: p95 over 30% of the step's budget."),
        Panel("Batch size (inferences per execution)", "none",
              (_per_model(f"kyc:batch_size:rate{w}"),),
              "Dynamic batching at work: 1 means every request ran alone."),
        Panel("Pending requests", "none",
              ((f"sum by (model) (nv_inference_pending_request_count{{{SEL}}})", "{{model}}"),),
              "Requests queued or running, all servers."),
        Panel("Autoscaler signal: queue time per request, per pod", "µs",
              (_per_namespace(POD_QUEUE_RULE, "{{pod}}"),),
              "What the HorizontalPodAutoscaler reads (kyc_queue_us_per_request through "
              "the Prometheus adapter); its target is in deploy/kubernetes/base/hpa.yaml."),
        Panel("Servers up", "none",
              ((f'sum(up{{job="{JOB}", {NS}}})', "up"),
               (f'count(up{{job="{JOB}", {NS}}})', "scraped")),
              "Servers whose metrics answer, against those Prometheus knows."),
        Panel("Liveness sessions", "none",
              (_per_namespace("kyc:liveness_sessions_live:sum", "live"),),
              "Sessions held by liveness_sequence on all servers."),
        Panel("Liveness sessions started and evicted per second", "ops",
              (_per_namespace("kyc:liveness_sessions_started:rate15m", "started"),
               _per_namespace("kyc:liveness_sessions_evicted:rate15m", "evicted (idle timeout)")),
              "Alert KycLivenessSessionsEvicted: over 10% of sessions time out."),
    ]


def _variable(name: str, label: str, query: str) -> dict[str, Any]:
    return {"name": name, "label": label, "type": "query",
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": f"{name}-variable"},
            "definition": query, "refresh": 2, "multi": True, "includeAll": True,
            "allValue": ".*", "current": {"text": "All", "value": "$__all"},
            "sort": 1}


def dashboard() -> dict[str, Any]:
    """The dashboard JSON (Grafana's dashboard model, schema version 39)."""
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    built = []
    for index, panel in enumerate(panels()):
        built.append({
            "id": index + 1,
            "type": "timeseries",
            "title": panel.title,
            "description": panel.description,
            "datasource": datasource,
            "gridPos": {"h": HEIGHT, "w": WIDTH, "x": (index % 2) * WIDTH,
                        "y": (index // 2) * HEIGHT},
            "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
            "options": {"legend": {"displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "multi"}},
            "targets": [{"refId": chr(ord("A") + n), "datasource": datasource,
                         "expr": expr, "legendFormat": legend}
                        for n, (expr, legend) in enumerate(panel.targets)],
        })
    return {
        "uid": UID,
        "title": TITLE,
        "description": "Generated by `kyc deploy render` (kyc_tools.ops.dashboard): edit the code, "
                       "not this file.",
        "tags": ["kyc", "triton"],
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": False,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "timezone": "utc",
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource",
             "query": "prometheus", "current": {}, "hide": 0},
            _variable("namespace", "Namespace", f'label_values(up{{job="{JOB}"}}, namespace)'),
            _variable("model", "Model", f"label_values(nv_inference_count{{{NS}}}, model)"),
        ]},
        "panels": built,
    }


def expressions() -> list[str]:
    """Every PromQL expression of the dashboard (the integration test runs them)."""
    return [expr for panel in panels() for expr, _ in panel.targets]
