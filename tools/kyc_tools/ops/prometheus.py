"""Prometheus recording rules and alerts for the KYC Triton servers.

Generated from the model repository (which models are ensembles or sequences) and
``kyc.budgets`` (each model's queue budget), rendered into
``deploy/prometheus/rules.yml`` by ``kyc deploy render``; promtool checks and unit
tests them (``deploy/prometheus/tests/``).

Series come from Triton's metrics endpoint (port 8002): the counters
``nv_inference_*`` per model and version, and, because ``kyc serve`` runs Triton
with ``--metrics-config=summary_latencies=true``, the summaries
``nv_inference_{request,queue,compute_infer}_summary_us`` with quantiles 0.5 to
0.999 over Triton's own sliding window, per server. A quantile of one server
cannot be combined with another's, so the per-model p95 is the worst server's
(``max``): an upper bound of the fleet's p95, which is what an alert needs.
The liveness series (``kyc_liveness_sessions_*``) are the custom metrics that
``liveness_sequence`` publishes through the Python backend. The repository series
(``kyc_repository_*``) come from ``kyc serve``'s repository watcher on its status port
(8003), scraped as job ``kyc-repository``: a second target per pod in job
``kyc-triton`` would double every rule over ``up``.

Every aggregation keeps ``namespace`` (and ``pod`` where it says so): the scrape
config copies both from Kubernetes; a single server without them aggregates the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kyc_tools.ops.models import ServedModel

JOB = "kyc-triton"
REPOSITORY_JOB = "kyc-repository"  # the watcher's status port (kyc serve --status-port)
WINDOW = "2m"  # rate windows: 8 scrapes at the 15 s interval of deploy/prometheus
QUANTILE = "0.95"

# thresholds of the alerts (the promtool tests pin them)
FAILURE_RATIO_WARN = 0.05
FAILURE_RATIO_PAGE = 0.25
EVICTED_SHARE_WARN = 0.10
FOR_FAILURES = "5m"
FOR_QUEUE = "10m"
FOR_NOT_READY = "5m"
FOR_DOWN = "2m"
FOR_EVICTIONS = "15m"
SHED_SHARE_WARN = 0.05
FOR_SHEDDING = "10m"
REFUSALS_WINDOW = "10m"

# the autoscaler's signal, exposed by the Prometheus adapter under this name
HPA_METRIC = "kyc_queue_us_per_request"
POD_QUEUE_RULE = f"kyc:pod_queue_us_per_request:rate{WINDOW}"


def _regex(names: Sequence[str]) -> str:
    return "|".join(sorted(names))


def recording_rules(models: Sequence[ServedModel]) -> list[dict[str, str]]:
    """The recording rules: per model (fleet-wide, by namespace) and per pod."""
    w = WINDOW
    by = "namespace, model"
    rate = f"kyc:request_rate:rate{w}"
    rules = [
        {"record": rate,
         "expr": f"sum by ({by}) (rate(nv_inference_request_success[{w}])) + "
                 f"sum by ({by}) (rate(nv_inference_request_failure[{w}]))"},
        {"record": f"kyc:request_failure_rate:rate{w}",
         "expr": f"sum by ({by}, reason) (rate(nv_inference_request_failure[{w}]))"},
        {"record": f"kyc:failure_ratio:rate{w}",
         "expr": f"sum by ({by}) (rate(nv_inference_request_failure[{w}])) / {rate}"},
        {"record": f"kyc:queue_us_per_request:rate{w}",
         "expr": f"sum by ({by}) (rate(nv_inference_queue_duration_us[{w}])) / {rate}"},
        {"record": f"kyc:compute_us_per_request:rate{w}",
         "expr": f"sum by ({by}) (rate(nv_inference_compute_infer_duration_us[{w}])) / {rate}"},
        {"record": f"kyc:batch_size:rate{w}",
         "expr": f"sum by ({by}) (rate(nv_inference_count[{w}])) / "
                 f"sum by ({by}) (rate(nv_inference_exec_count[{w}]))"},
    ]
    for what, metric in (("request", "nv_inference_request_summary_us"),
                         ("queue", "nv_inference_queue_summary_us"),
                         ("compute", "nv_inference_compute_infer_summary_us")):
        rules.append({"record": f"kyc:{what}_us_p95:max",
                      "expr": f'max by ({by}) ({metric}{{quantile="{QUANTILE}"}})'})
    batched = _regex([m.name for m in models if m.batched])
    rules += [
        # The autoscaler's signal: how long a request waits for an instance, on
        # average over the stateless models of one pod (ensembles report ~0 queue;
        # a liveness frame's queue includes the client streaming faster than real time).
        {"record": POD_QUEUE_RULE,
         "expr": f'sum by (namespace, pod) (rate(nv_inference_queue_duration_us'
                 f'{{model=~"{batched}"}}[{w}])) / clamp_min(sum by (namespace, pod) '
                 f'(rate(nv_inference_request_success{{model=~"{batched}"}}[{w}])), 0.001)'},
        {"record": "kyc:liveness_sessions_live:sum",
         "expr": "sum by (namespace) (kyc_liveness_sessions_live)"},
        {"record": "kyc:liveness_sessions_started:rate15m",
         "expr": "sum by (namespace) (rate(kyc_liveness_sessions_started_total[15m]))"},
        {"record": "kyc:liveness_sessions_evicted:rate15m",
         "expr": "sum by (namespace) (rate(kyc_liveness_sessions_evicted_total[15m]))"},
        # kyc_intake's admission control of kyc_ensemble and document_ocr, per entry
        # (kyc.intake.admission)
        {"record": f"kyc:admission_admitted:rate{w}",
         "expr": f"sum by (namespace, entry) (rate(kyc_admission_admitted_total[{w}]))"},
        {"record": f"kyc:admission_shed:rate{w}",
         "expr": f"sum by (namespace, entry) (rate(kyc_admission_shed_total[{w}]))"},
        {"record": "kyc:admission_limit:sum",
         "expr": "sum by (namespace, entry) (kyc_admission_limit)"},
    ]
    # each model's queue budget as a series, for the alert and the dashboard
    rules.append({"record": "kyc:queue_budget_us", "expr": " or ".join(
        f'label_replace(vector({m.queue_budget_us:.0f}), "model", "{m.name}", "", "")'
        for m in models if m.queue_budget_us is not None)})
    return rules


def alerting_rules(models: Sequence[ServedModel]) -> list[dict[str, Any]]:
    """The alerts. Every one names the model (or the pod) and says what to look at."""
    return [*_fleet_alerts(), *(_not_ready_alert(model.name) for model in models),
            _drop_refused_alert()]


def _alert(name: str, expr: str, severity: str, summary: str, description: str, *,
           for_: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """An alerting rule: it fires after ``for_`` (None: at once)."""
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ is not None:
        rule["for"] = for_
    rule["labels"] = {"severity": severity, **(labels or {})}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


def _fleet_alerts() -> list[dict[str, Any]]:
    """The alerts on the servers, on every model's failures and queues, on liveness."""
    w = WINDOW
    ratio = f"kyc:failure_ratio:rate{w}"
    failing = "{{ $labels.model }}: {{ $value | humanizePercentage }} of requests fail"
    return [
        _alert("KycTritonDown", f'up{{job="{JOB}"}} == 0', "page",
               "KYC Triton server {{ $labels.pod }} cannot be scraped",
               f"Its metrics endpoint (8002) has not answered for {FOR_DOWN}: the server is "
               "down or restarting (kyc serve exits with code 3 when a Python stub died).",
               for_=FOR_DOWN),
        _alert("KycModelFailureRatioHigh", f"{ratio} > {FAILURE_RATIO_WARN}", "warning", failing,
               f"More than {FAILURE_RATIO_WARN:.0%} of {{{{ $labels.model }}}}'s requests failed "
               f"over {w}, for {FOR_FAILURES}. Bad client input counts too: compare with "
               "kyc:request_failure_rate by reason.",
               for_=FOR_FAILURES),
        _alert("KycModelFailureRatioCritical", f"{ratio} > {FAILURE_RATIO_PAGE}", "page", failing,
               f"More than {FAILURE_RATIO_PAGE:.0%} of {{{{ $labels.model }}}}'s requests failed "
               f"over {w}, for {FOR_FAILURES}.",
               for_=FOR_FAILURES),
        _alert("KycQueueTimeOverBudget",
               "kyc:queue_us_p95:max > on (model) group_left kyc:queue_budget_us", "warning",
               "{{ $labels.model }}: p95 queue time {{ $value | humanize }}us is over its budget",
               "The worst server's p95 queue time of {{ $labels.model }} has been over 30% of "
               f"its step's latency budget (kyc.budgets) for {FOR_QUEUE}: add replicas (is the "
               "autoscaler at its maximum?) or instances.",
               for_=FOR_QUEUE),
        _alert("KycLivenessSessionsEvicted",
               "kyc:liveness_sessions_evicted:rate15m / "
               f"kyc:liveness_sessions_started:rate15m > {EVICTED_SHARE_WARN}", "warning",
               "{{ $value | humanizePercentage }} of liveness sessions time out",
               "Sessions idle for idle_ttl_s are evicted: apps that stop streaming, or frames "
               "of one session reaching different replicas (send a session over one gRPC "
               "stream).",
               for_=FOR_EVICTIONS),
        _alert("KycCustomersShed",
               f"kyc:admission_shed:rate{w} / clamp_min(kyc:admission_shed:rate{w} + "
               f"kyc:admission_admitted:rate{w}, 0.001) > {SHED_SHARE_WARN}", "warning",
               "{{ $value | humanizePercentage }} of {{ $labels.entry }} requests are refused "
               "at capacity",
               "kyc_intake's admission control refuses {{ $labels.entry }} requests (UNAVAILABLE, "
               "the SDK retries) because the servers are at the number they can finish inside "
               f"the SLA, for {FOR_SHEDDING}: add replicas (is the autoscaler at its "
               "maximum?); kyc:admission_limit:sum is the fleet's capacity in flight.",
               for_=FOR_SHEDDING),
    ]


def _not_ready_alert(model: str) -> dict[str, Any]:
    """``model`` is not loaded on a server that answers."""
    return _alert(
        "KycModelNotReady",
        f'up{{job="{JOB}"}} == 1 unless on (namespace, pod) nv_inference_count{{model="{model}"}}',
        "page",
        f"{model} is not loaded on {{{{ $labels.pod }}}}",
        f"The server answers but exports no series for {model}: it failed to load or was "
        "unloaded. The pod stays ready (readiness is not strict) and keeps taking traffic, "
        f"and every request that needs {model} fails there (kyc_ensemble needs most "
        "models). `kubectl exec -n {{ $labels.namespace }} {{ $labels.pod }} -- kyc repo "
        "status` shows why.",
        for_=FOR_NOT_READY, labels={"model": model},
    )


def _drop_refused_alert() -> dict[str, Any]:
    """The repository watcher refused a drop. The counter's series for a model and stage
    appears at its first refusal with the value 1 already, which increase() cannot see;
    so a series younger than the window counts too."""
    refusals, rw = "kyc_repository_refusals_total", REFUSALS_WINDOW
    return _alert(
        "KycModelDropRefused",
        f"sum by (namespace, pod, model, stage) (increase({refusals}[{rw}]) > 0 "
        f"or ({refusals} unless {refusals} offset {rw}))",
        "warning",
        "{{ $labels.model }}: a dropped version, config or model was refused on "
        "{{ $labels.pod }} ({{ $labels.stage }})",
        f"In the last {rw}, kyc serve's repository watcher refused what was dropped into "
        "{{ $labels.model }} (stage check: a version failed kyc repo check; load: Triton "
        "could not load it; config: an edited config; model: a new model). The previous "
        "version (or config) keeps serving; a refused new model is not served. `kubectl "
        "exec -n {{ $labels.namespace }} {{ $labels.pod }} -- kyc repo status` shows why; "
        "a refused folder is looked at again when it changes.",
    )


def rule_groups(models: Sequence[ServedModel]) -> dict[str, Any]:
    """The rules file: one group of recording rules, one of alerts."""
    return {"groups": [
        {"name": "kyc-triton.recording", "rules": recording_rules(models)},
        {"name": "kyc-triton.alerts", "rules": alerting_rules(models)},
    ]}


def adapter_rules() -> dict[str, Any]:
    """prometheus-adapter's custom-metrics rule for the autoscaler's signal."""
    return {"rules": [{
        "seriesQuery": f'{POD_QUEUE_RULE}{{namespace!="",pod!=""}}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"},
                                    "pod": {"resource": "pod"}}},
        "name": {"matches": f"^{POD_QUEUE_RULE}$", "as": HPA_METRIC},
        "metricsQuery": f"max by (<<.GroupBy>>) ({POD_QUEUE_RULE}{{<<.LabelMatchers>>}})",
    }]}


def adapter_query(namespace: str, pod_regex: str = ".+") -> str:
    """The adapter's metricsQuery as it sends it for the pods of ``namespace``."""
    query = adapter_rules()["rules"][0]["metricsQuery"]
    return (query.replace("<<.GroupBy>>", "pod")
            .replace("<<.LabelMatchers>>", f'namespace="{namespace}",pod=~"{pod_regex}"'))
