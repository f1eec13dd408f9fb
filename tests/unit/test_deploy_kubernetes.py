"""deploy/kubernetes and deploy/kserve, offline: every rendered resource validates
against the Kubernetes API schemas of a pinned version, and the manifests agree with
the Dockerfile, the public contract, kyc serve's options and the liveness settings."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from deploy_manifests import DEPLOY, KSERVE, KUBERNETES_VERSION, one, rendered
from kyc.decision.ledger import ENV_LEDGER, RedisLedger, ledger_from_environ
from kyc.keys import ENV_KEY_FILE
from kyc_client.channel import CLIENT_KEY_ENV
from kyc_testing import PROJECT_ROOT, SHIPPED_REPOSITORY
from kyc_tools.cli import build_parser
from kyc_tools.ops import prometheus
from kyc_tools.ops.models import served_models
from kyc_tools.repo.config import model_parameters
from kyc_tools.repo.graph.build import build_graph
from kyc_tools.repo.graph.derive import step_map

OVERLAYS = ("kubernetes/overlays/gpu", "kubernetes/overlays/cpu")
WEB = "kubernetes/overlays/cpu-web"  # the cpu overlay with components/web (the capture page)
CLIENT_KEY_REF = {"name": "kyc-triton-keys", "key": "client-key"}
CONTRACT = PROJECT_ROOT.parent / "shared" / "notes" / "contract.md"


def server(resources) -> dict:
    return one(resources, "Deployment", "kyc-triton")


def container(deployment: dict, name: str = "triton") -> dict:
    return next(c for c in deployment["spec"]["template"]["spec"]["containers"]
                if c["name"] == name)


@cache
def dockerfile() -> dict:
    """EXPOSE, USER, ENTRYPOINT and the --shm-size of the documented run command."""
    text = (PROJECT_ROOT / "Dockerfile").read_text()
    final = text[text.rindex("\nFROM "):]
    return {
        "expose": {int(p) for p in re.search(r"^EXPOSE (.+)$", final, re.M).group(1).split()},
        "user": re.search(r"^USER (\d+):(\d+)$", final, re.M).groups(),
        "entrypoint": json.loads(re.search(r"^ENTRYPOINT (\[.+\])$", final, re.M).group(1)),
        "shm": re.search(r"--shm-size=(\d+)g", text).group(1),
    }


def serve_options(args: list[str]):
    """kyc serve's options as the image's entrypoint plus ``args`` give them."""
    entry = dockerfile()["entrypoint"]
    assert entry[:2] == ["kyc", "serve"]
    return build_parser().parse_args(entry[1:] + args)


# -- schemas ---------------------------------------------------------------------------
@pytest.mark.parametrize("target", OVERLAYS)
def test_every_resource_of_an_overlay_validates_strictly_against_the_kubernetes_schemas(target):
    resources = rendered(target)
    kinds = sorted({r["kind"] for r in resources})
    assert kinds == ["Deployment", "HorizontalPodAutoscaler", "Namespace", "NetworkPolicy",
                     "PersistentVolumeClaim", "PodDisruptionBudget", "Service"]
    for resource in resources:
        assert kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


def test_the_kubernetes_resources_of_the_kserve_deployment_validate_too():
    builtin = [r for r in rendered(KSERVE) if "kserve.io" not in r["apiVersion"]]
    assert sorted({r["kind"] for r in builtin}) == [
        "Deployment", "HorizontalPodAutoscaler", "Job", "NetworkPolicy", "PersistentVolumeClaim",
        "Service"]  # the Deployment and Service: the token ledger (kubernetes/ledger)
    for resource in builtin:
        assert kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


def test_strict_validation_catches_a_misspelled_field():
    deployment = json.loads(json.dumps(server(rendered(OVERLAYS[0]))))
    container(deployment)["readinesProbe"] = container(deployment).pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSION, strict=True)


# -- agreement with the image and the contract -----------------------------------------
@pytest.mark.parametrize("target", OVERLAYS)
def test_ports_user_and_repository_agree_with_the_dockerfile(target):
    deployment = server(rendered(target))
    triton = container(deployment)
    assert "command" not in triton, "the image's ENTRYPOINT (kyc serve) must stay"
    assert {p["containerPort"] for p in triton["ports"]} == dockerfile()["expose"]
    pod = deployment["spec"]["template"]["spec"]
    uid, gid = dockerfile()["user"]
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
        int(uid), int(gid))
    options = serve_options(triton["args"])
    assert options.production  # the entrypoint's --production survives the args
    mount = next(m for m in triton["volumeMounts"] if m["name"] == "models")
    assert Path(mount["mountPath"]) == options.model_repository
    assert mount["readOnly"] is True


def test_ports_and_image_agree_with_the_public_contract():
    if not CONTRACT.is_file():
        pytest.skip(f"the contract is not beside this checkout ({CONTRACT})")
    contract = CONTRACT.read_text()
    assert "HTTP 8000, gRPC 8001, metrics 8002" in contract
    assert "docker build -t kyc-triton ." in contract
    # the contract's three ports, and kyc serve's repository status port beside them
    ports = {"http": 8000, "grpc": 8001, "metrics": 8002,
             "repo-status": build_parser().parse_args(["serve"]).status_port}
    triton = container(server(rendered(OVERLAYS[0])))
    assert {p["name"]: p["containerPort"] for p in triton["ports"]} == ports
    service = one(rendered(OVERLAYS[0]), "Service", "kyc-triton")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == ports
    base = yaml.safe_load((DEPLOY / "kubernetes/base/kustomization.yaml").read_text())
    assert [i["name"] for i in base["images"]] == ["kyc-triton"]


@pytest.mark.parametrize("target", (*OVERLAYS, KSERVE))
def test_probes_are_triton_health_endpoints_on_the_http_port(target):
    resources = rendered(target)
    spec = (container(server(resources)) if target != KSERVE else
            one(resources, "ServingRuntime")["spec"]["containers"][0])
    http = {"http", 8000}
    assert spec["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert spec["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert spec["startupProbe"]["httpGet"]["path"] == "/v2/health/live"
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert spec[probe]["httpGet"]["port"] in http
    startup = spec["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 600  # engine builds


def server_container_and_volumes(target) -> tuple[dict, list[dict]]:
    """The Triton container and the pod's volumes, in a Deployment or a ServingRuntime."""
    resources = rendered(target)
    if target == KSERVE:
        runtime = one(resources, "ServingRuntime")["spec"]
        return runtime["containers"][0], runtime["volumes"]
    deployment = server(resources)
    return container(deployment), deployment["spec"]["template"]["spec"]["volumes"]


@pytest.mark.parametrize("target", (*OVERLAYS, KSERVE))
def test_the_keys_come_from_one_secret_as_kyc_serve_reads_them(target):
    triton, volumes = server_container_and_volumes(target)
    env = {e["name"]: e for e in triton["env"]}
    admin_env = build_parser().parse_args(["serve"]).admin_key_env
    assert env[admin_env]["valueFrom"]["secretKeyRef"] == {"name": "kyc-triton-keys",
                                                           "key": "admin-key"}
    assert env[CLIENT_KEY_ENV]["valueFrom"]["secretKeyRef"] == CLIENT_KEY_REF
    key_file = Path(env[ENV_KEY_FILE]["value"])
    keys = next(v for v in volumes if v["name"] == "keys")["secret"]
    assert keys["secretName"] == "kyc-triton-keys"
    mount = next(m for m in triton["volumeMounts"] if m["name"] == "keys")
    assert key_file.parent == Path(mount["mountPath"])
    assert {"key": "token-key", "path": key_file.name} in keys["items"]


@pytest.mark.parametrize("target", (*OVERLAYS, KSERVE))
def test_dev_shm_is_memory_and_at_least_what_the_image_documents(target):
    resources = rendered(target)
    volumes = (one(resources, "ServingRuntime")["spec"]["volumes"] if target == KSERVE
               else server(resources)["spec"]["template"]["spec"]["volumes"])
    shm = next(v for v in volumes if v["name"] == "dshm")["emptyDir"]
    assert shm["medium"] == "Memory" and shm["sizeLimit"] == f"{dockerfile()['shm']}Gi"


@pytest.mark.parametrize("target", OVERLAYS)
def test_a_removed_server_drains_open_liveness_sessions_before_it_is_killed(target):
    deployment = server(rendered(target))
    triton = container(deployment)
    options = serve_options(triton["args"])
    pre_stop = int(triton["lifecycle"]["preStop"]["exec"]["command"][-1])
    max_session_s = float(model_parameters(SHIPPED_REPOSITORY, "liveness_sequence")[
        "max_duration_s"])
    assert options.drain_secs >= max_session_s
    assert options.exit_timeout_secs < options.stop_grace
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert pre_stop + options.drain_secs + options.stop_grace < grace


@pytest.mark.parametrize("target", (*OVERLAYS, KSERVE, WEB))
def test_every_pod_meets_the_restricted_pod_security_standard(target):
    for resource in rendered(target):
        if resource["kind"] == "ServingRuntime":
            pod, containers = {}, resource["spec"]["containers"]
        elif resource["kind"] in ("Deployment", "Job"):
            pod = resource["spec"]["template"]["spec"]
            containers = pod["containers"] + pod.get("initContainers", [])
        else:
            continue
        for c in containers:
            context = {**pod.get("securityContext", {}), **c.get("securityContext", {})}
            where = f"{resource['metadata']['name']}/{c['name']}"
            assert context.get("runAsNonRoot") is True or pod == {}, where
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            assert (pod.get("securityContext", context)["seccompProfile"]["type"]
                    == "RuntimeDefault"), where
            assert context["readOnlyRootFilesystem"] is True, where


# -- the shared repository ------------------------------------------------------------
@pytest.mark.parametrize("target", OVERLAYS)
def test_servers_publisher_and_seed_share_one_repository_volume(target):
    resources = rendered(target)
    claim = one(resources, "PersistentVolumeClaim", "kyc-models")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    deployment = server(resources)
    pod = deployment["spec"]["template"]["spec"]
    seed = next(c for c in pod["initContainers"] if c["name"] == "seed-models")
    assert seed["command"][:3] == ["kyc", "repo", "seed"]
    seed_args = build_parser().parse_args(seed["command"][1:])
    options = serve_options(container(deployment)["args"])
    assert seed_args.src == options.model_repository  # the image's own repository
    seed_mount = next(m for m in seed["volumeMounts"] if m["name"] == "models")
    served = next(m for m in container(deployment)["volumeMounts"] if m["name"] == "models")
    assert seed_args.dest == Path(seed_mount["mountPath"]) / served["subPath"]
    publisher = one(resources, "Deployment", "kyc-triton-publisher")
    assert publisher["spec"]["replicas"] == 0
    ppod = publisher["spec"]["template"]["spec"]
    assert ppod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "kyc-models"
    pmount = next(m for m in ppod["containers"][0]["volumeMounts"] if m["name"] == "models")
    assert pmount["mountPath"] == seed_mount["mountPath"] and not pmount.get("readOnly")
    for volumes in (pod["volumes"], ppod["volumes"]):
        assert next(v for v in volumes if v["name"] == "models")[
            "persistentVolumeClaim"]["claimName"] == "kyc-models"
    # the publish command the publisher documents targets the seeded repository
    text = (DEPLOY / "kubernetes/base/publisher.yaml").read_text()
    assert f"--repository {seed_args.dest}" in text


def test_kserve_mounts_the_same_volume_and_serves_it_with_the_same_image_entrypoint():
    resources = rendered(KSERVE)
    isvc = one(resources, "InferenceService", "kyc")
    model = isvc["spec"]["predictor"]["model"]
    assert model["storageUri"] == "pvc://kyc-models/models"
    assert isvc["metadata"]["annotations"]["serving.kserve.io/deploymentMode"] == "RawDeployment"
    runtime = one(resources, "ServingRuntime", model["runtime"])
    kserve_container = runtime["spec"]["containers"][0]
    assert "command" not in kserve_container
    options = serve_options(kserve_container["args"])
    assert options.model_repository == Path("/mnt/models") and options.production
    pre_stop = int(kserve_container["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert options.drain_secs >= float(model_parameters(SHIPPED_REPOSITORY, "liveness_sequence")[
        "max_duration_s"])
    assert (pre_stop + options.drain_secs + options.stop_grace
            < isvc["spec"]["predictor"]["terminationGracePeriodSeconds"])
    assert {p["containerPort"] for p in kserve_container["ports"]} == dockerfile()["expose"]
    assert model["modelFormat"]["name"] in {f["name"] for f in
                                            runtime["spec"]["supportedModelFormats"]}
    job = one(resources, "Job", "kyc-seed-models")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    seed = build_parser().parse_args(command[1:])
    assert seed.dest.name == "models"  # pvc://kyc-models/models


@pytest.mark.parametrize("target", (*OVERLAYS, KSERVE))
def test_servers_watch_the_shared_volume_by_polling_into_a_live_copy_under_tmp(target):
    """The volume is NFS-like (another machine's writes raise no inotify event); the
    live copy Triton reads goes to the writable /tmp emptyDir, sized for it; the
    watcher's status port is a named container port that Prometheus scrapes."""
    triton, volumes = server_container_and_volumes(target)
    options = serve_options(triton["args"])
    assert options.watch and options.watch_polling
    tmp = next(m for m in triton["volumeMounts"] if m["name"] == "tmp")
    assert options.live_dir.is_relative_to(tmp["mountPath"])
    size = next(v for v in volumes if v["name"] == "tmp")["emptyDir"]["sizeLimit"]
    assert size.endswith("Gi") and int(size[:-2]) >= 2  # repository copy + TensorRT cache
    ports = {p["name"]: p["containerPort"] for p in triton["ports"]}
    assert ports["repo-status"] == options.status_port
    jobs = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]
    scraped = {r["regex"] for job in jobs for r in job["relabel_configs"]
               if r.get("source_labels") == ["__meta_kubernetes_pod_container_port_name"]}
    assert {"metrics", "repo-status"} <= scraped and {"metrics", "repo-status"} <= ports.keys()


# -- who reaches the servers -----------------------------------------------------------
def server_pod_labels(target) -> dict:
    resources = rendered(target)
    if target == KSERVE:
        return one(resources, "InferenceService")["spec"]["predictor"]["labels"]
    return server(resources)["spec"]["template"]["metadata"]["labels"]


def ingress_to_servers(target) -> tuple[list[dict], dict[int, list[dict]]]:
    """The NetworkPolicies that select the server pods, and per port the peers let in."""
    labels = server_pod_labels(target)
    policies = [r for r in rendered(target) if r["kind"] == "NetworkPolicy"
                and r["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]
    allowed: dict[int, list[dict]] = {}
    for policy in policies:
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        for rule in policy["spec"].get("ingress", []):
            assert rule.get("from") and rule.get("ports"), "a rule without both lets all in"
            for port in rule["ports"]:
                allowed.setdefault(port["port"], []).extend(rule["from"])
    return policies, allowed


@pytest.mark.parametrize("target", (*OVERLAYS, KSERVE))
def test_only_web_pods_reach_http_and_grpc_and_only_prometheus_the_metrics(target):
    policies, allowed = ingress_to_servers(target)
    assert any("ingress" not in p["spec"] for p in policies), "no default deny"
    triton, _ = server_container_and_volumes(target)
    ports = {p["name"]: p["containerPort"] for p in triton["ports"]}
    assert set(allowed) == set(dockerfile()["expose"]) == set(ports.values())
    for name in ("http", "grpc"):
        assert allowed[ports.get(name, ports.get("h2c"))] == [
            {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "kyc-web"}}}]
    for name in ("metrics", "repo-status"):
        (peer,) = allowed[ports[name]]
        assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
        assert "kubernetes.io/metadata.name" in peer["namespaceSelector"]["matchLabels"]


def test_the_web_pods_send_the_servers_client_key_from_the_same_secret():
    web = container(one(rendered(WEB), "Deployment", "kyc-web"), "web")
    env = {e["name"]: e for e in web["env"]}
    assert env[CLIENT_KEY_ENV]["valueFrom"]["secretKeyRef"] == CLIENT_KEY_REF


def test_the_web_pods_are_the_ones_the_policy_lets_reach_triton():
    _, allowed = ingress_to_servers(WEB)
    web = one(rendered(WEB), "Deployment", "kyc-web")["spec"]["template"]["metadata"]["labels"]
    assert allowed[8001][0]["podSelector"]["matchLabels"].items() <= web.items()
    assert not allowed[8001][0]["podSelector"]["matchLabels"].items() <= \
        server_pod_labels(WEB).items()


def test_the_kserve_inference_service_is_reachable_inside_the_cluster_only():
    labels = one(rendered(KSERVE), "InferenceService", "kyc")["metadata"]["labels"]
    assert labels["networking.kserve.io/visibility"] == "cluster-local"
    assert labels["networking.knative.dev/visibility"] == "cluster-local"


@pytest.mark.parametrize("target", (*OVERLAYS, KSERVE))
def test_the_servers_listen_on_every_interface_of_the_pod_by_the_images_own_option(target):
    triton, _ = server_container_and_volumes(target)
    assert "--host" not in triton["args"] and "--address" not in triton["args"]
    assert serve_options(triton["args"]).address == "0.0.0.0"



# -- the shared ledger of spent liveness tokens (kubernetes/ledger) -------------------
LEDGER = "kyc-token-ledger"


def ledger(resources) -> tuple[dict, dict]:
    """The ledger's Redis container and its pod spec."""
    pod = one(resources, "Deployment", LEDGER)["spec"]["template"]["spec"]
    return container(one(resources, "Deployment", LEDGER), "redis"), pod


@pytest.mark.parametrize("target", (*OVERLAYS, KSERVE))
def test_every_server_spends_tokens_in_the_one_redis_the_deployment_runs(target):
    resources = rendered(target)
    triton, _ = server_container_and_volumes(target)
    url = next(e["value"] for e in triton["env"] if e["name"] == ENV_LEDGER)
    assert isinstance(ledger_from_environ({ENV_LEDGER: url}), RedisLedger)
    match = re.fullmatch(r"redis://([a-z0-9-]+):(\d+)/0", url)
    assert match, url
    service = one(resources, "Service", match.group(1))
    (port,) = service["spec"]["ports"]
    assert port["port"] == int(match.group(2))
    deployment = one(resources, "Deployment", LEDGER)
    assert service["spec"]["selector"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()
    redis, _ = ledger(resources)
    assert port["targetPort"] in {p["name"] for p in redis["ports"]}
    # one ledger, never two at once (each would accept a token once)
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"]["type"] == "Recreate"


@pytest.mark.parametrize("target", (*OVERLAYS, KSERVE))
def test_the_ledger_keeps_nothing_on_disk_and_refuses_rather_than_forget_a_spent_token(target):
    redis, pod = ledger(rendered(target))
    assert re.fullmatch(r"redis:7\.\d+\.\d+", redis["image"]), "the official image, by tag"
    args = redis["args"]
    options = dict(zip(args[1::2], args[2::2], strict=True))
    assert args[0] == "redis-server" and options["--save"] == ""
    assert options["--appendonly"] == "no"
    assert options["--maxmemory-policy"] == "noeviction"  # full: UNAVAILABLE, not a replay
    assert int(options["--port"]) == next(p["containerPort"] for p in redis["ports"])
    # the image's redis user, a read-only root with an emptyDir as its working directory
    assert (pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]) == (
        999, 999)
    data = next(m for m in redis["volumeMounts"] if m["mountPath"] == "/data")
    assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == data["name"])
    for probe in ("readinessProbe", "livenessProbe"):
        assert redis[probe]["exec"]["command"] == ["redis-cli", "ping"]
    assert redis["resources"]["limits"]["memory"] and redis["resources"]["requests"]["cpu"]
    assert pod["automountServiceAccountToken"] is False


@pytest.mark.parametrize("target", (*OVERLAYS, KSERVE, WEB))
def test_only_the_server_pods_reach_the_ledger(target):
    resources = rendered(target)
    labels = one(resources, "Deployment", LEDGER)["spec"]["template"]["metadata"]["labels"]
    policies = [r for r in resources if r["kind"] == "NetworkPolicy"
                and r["spec"]["podSelector"]["matchLabels"].items() <= labels.items()]
    rules = [rule for p in policies for rule in p["spec"]["ingress"]]
    assert policies and all(p["spec"]["policyTypes"] == ["Ingress"] for p in policies)
    (rule,) = rules
    redis, _ = ledger(resources)
    assert rule["ports"] == [{"port": redis["ports"][0]["containerPort"], "protocol": "TCP"}]
    (peer,) = rule["from"]
    assert set(peer) == {"podSelector"}  # this namespace's pods, no other namespace
    selector = peer["podSelector"]["matchLabels"]
    assert selector.items() <= server_pod_labels(target).items()
    others = [d["spec"]["template"]["metadata"]["labels"] for d in resources
              if d["kind"] == "Deployment" and d["metadata"]["name"] != "kyc-triton"]
    assert not any(selector.items() <= other.items() for other in others)  # web, publisher


# -- selection and scaling ------------------------------------------------------------
@pytest.mark.parametrize("target", OVERLAYS)
def test_services_and_the_budget_select_the_servers_and_not_the_publisher(target):
    resources = rendered(target)
    labels = server(resources)["spec"]["template"]["metadata"]["labels"]
    publisher = one(resources, "Deployment", "kyc-triton-publisher")
    plabels = publisher["spec"]["template"]["metadata"]["labels"]
    selectors = [s["spec"]["selector"] for s in resources if s["kind"] == "Service"
                 and s["metadata"]["name"].startswith("kyc-triton")]
    selectors.append(one(resources, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"])
    for selector in selectors:
        assert selector.items() <= labels.items()
        assert not selector.items() <= plabels.items()


@pytest.mark.parametrize("target", (*OVERLAYS, KSERVE))
def test_the_autoscaler_reads_the_adapter_metric_with_a_target_under_every_queue_share(target):
    resources = rendered(target)
    hpa = one(resources, "HorizontalPodAutoscaler")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == prometheus.HPA_METRIC
    assert prometheus.adapter_rules()["rules"][0]["name"]["as"] == prometheus.HPA_METRIC
    target_us = float(metric["pods"]["target"]["averageValue"])
    steps = step_map(build_graph(SHIPPED_REPOSITORY))
    shares = [steps.queue_timeout_us(m.name) for m in served_models(SHIPPED_REPOSITORY)
              if m.batched]
    assert 0 < target_us < min(s for s in shares if s is not None)
    ref = hpa["spec"]["scaleTargetRef"]
    if target == KSERVE:  # RawDeployment names the predictor's Deployment <isvc>-predictor
        assert ref["name"] == one(resources, "InferenceService")["metadata"]["name"] + "-predictor"
    else:
        assert ref["name"] == server(resources)["metadata"]["name"]
        assert hpa["spec"]["minReplicas"] <= server(resources)["spec"]["replicas"]


def test_only_the_gpu_overlay_asks_for_a_gpu():
    gpu = container(server(rendered(OVERLAYS[0])))["resources"]["limits"]
    cpu = container(server(rendered(OVERLAYS[1])))["resources"]["limits"]
    assert gpu["nvidia.com/gpu"] == 1 and "nvidia.com/gpu" not in cpu
    for target in OVERLAYS:
        namespace = one(rendered(target), "Namespace")
        assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == \
            "restricted"
        assert {r["metadata"].get("namespace") for r in rendered(target)
                if r["kind"] != "Namespace"} == {namespace["metadata"]["name"]}


# -- the capture page (components/web) ----------------------------------------------------
def test_the_web_component_validates_and_adds_only_the_page_to_the_overlay():
    resources = rendered(WEB)
    for resource in resources:
        assert kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)
    names = {(r["kind"], r["metadata"]["name"]) for r in resources}
    cpu = {(r["kind"], r["metadata"]["name"]) for r in rendered("kubernetes/overlays/cpu")}
    assert names - cpu == {("Deployment", "kyc-web"), ("Service", "kyc-web"),
                           ("Ingress", "kyc-web")}
    assert {r["metadata"].get("namespace") for r in resources if r["kind"] != "Namespace"} \
        == {"kyc-staging"}


def test_the_page_is_the_only_public_entry_and_reaches_triton_over_the_cluster_network():
    resources = rendered(WEB)
    web = container(one(resources, "Deployment", "kyc-web"), "web")
    assert web["image"] == container(server(resources))["image"]  # one image
    args = build_parser().parse_args(web["command"][1:])
    assert args.func.__name__ == "cmd_web" and args.host == "0.0.0.0"
    host, port = args.url.rsplit(":", 1)
    triton = one(resources, "Service", "kyc-triton")
    assert host == "kyc-triton" and int(port) == next(
        p["port"] for p in triton["spec"]["ports"] if p["name"] == "grpc")
    assert args.trusted_proxies == 1  # behind the Ingress controller
    assert web["ports"] == [{"name": "web", "containerPort": args.port, "protocol": "TCP"}]
    assert web["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "web"}
    # nothing but the page is exposed: the Services are ClusterIP, the Ingress goes to kyc-web
    assert {s["spec"]["type"] for s in resources if s["kind"] == "Service"
            and s["spec"].get("clusterIP") != "None"} == {"ClusterIP"}
    ingress = one(resources, "Ingress", "kyc-web")
    backends = {path["backend"]["service"]["name"] for rule in ingress["spec"]["rules"]
                for path in rule["http"]["paths"]}
    assert backends == {"kyc-web"} and ingress["spec"]["tls"]
