#!/usr/bin/env python3
"""Checks deploy/kubernetes/ offline, as `kubectl apply -k` would need it to be:

- every resource kustomization.yaml lists exists and validates against Kubernetes' own schema
  (kubernetes-validate, strict: unknown fields are errors), the ConfigMap its generator makes too;
  the ServiceMonitor (a CRD, not in that schema) by its own few fields;
- the pieces agree: the probes ask /healthz and /readyz on the container's metrics port, the
  Services and the ServiceMonitor name ports the pod has, the volume mounts name volumes that
  exist, the config file sits where WEIR_CONFIG says, the data volume where weir.toml's data_dir
  says, and the grace period outlasts the stop's shutdown_timeout_ms.

Prints what it checked; exits 1 with the problems otherwise. Run by tests/operations.rs with the
test virtual environment (scripts/install-deps.sh installs kubernetes-validate there).
"""
import pathlib
import sys
import tomllib

import kubernetes_validate
import yaml

base = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "deploy/kubernetes")
problems = []


def check(ok, what):
    if not ok:
        problems.append(what)


kustomization = yaml.safe_load((base / "kustomization.yaml").read_text())
documents = []
for name in kustomization["resources"]:
    for doc in yaml.safe_load_all((base / name).read_text()):
        documents.append((name, doc))
for generator in kustomization.get("configMapGenerator", []):
    data = {pathlib.Path(f).name: (base / f).read_text() for f in generator["files"]}
    documents.append(("configMapGenerator", {"apiVersion": "v1", "kind": "ConfigMap",
                                              "metadata": {"name": generator["name"]}, "data": data}))

by_kind = {}
for source, doc in documents:
    by_kind.setdefault(doc["kind"], []).append(doc)
    if doc["apiVersion"].startswith("monitoring.coreos.com/"):
        spec = doc["spec"]
        check(spec["selector"]["matchLabels"] and spec["endpoints"], f"{source}: a ServiceMonitor needs a selector and endpoints")
        continue
    try:
        kubernetes_validate.validate(doc, "1.37.0", strict=True)
    except kubernetes_validate.ValidationError as e:
        problems.append(f"{source}: {doc['kind']} {doc['metadata']['name']}: {e.message} at {list(e.path)}")

(statefulset,) = by_kind["StatefulSet"]
pod = statefulset["spec"]["template"]["spec"]
(container,) = pod["containers"]
ports = {p["name"]: p["containerPort"] for p in container["ports"]}
check(ports.get("metrics") == 9464 and ports.get("postgres") == 4566, f"container ports {ports}")
for probe, path in [("startupProbe", "/healthz"), ("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")]:
    get = container[probe]["httpGet"]
    check(get["path"] == path and get["port"] == "metrics", f"{probe} asks {get}")
volumes = {v["name"] for v in pod["volumes"]} | {t["metadata"]["name"] for t in statefulset["spec"]["volumeClaimTemplates"]}
mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
for mount in container["volumeMounts"]:
    check(mount["name"] in volumes, f"mount of unknown volume {mount['name']}")
for service in by_kind["Service"]:
    for port in service["spec"]["ports"]:
        check(port["targetPort"] in ports, f"Service {service['metadata']['name']} targets {port['targetPort']}")
metrics_service = [s for s in by_kind["Service"] if any(p["name"] == "metrics" for p in s["spec"]["ports"])]
# Kustomize adds its common labels to every object.
common_labels = {k: v for entry in kustomization.get("labels", []) for k, v in entry["pairs"].items()}
for monitor in by_kind.get("ServiceMonitor", []):
    wanted = monitor["spec"]["selector"]["matchLabels"]
    chosen = [s for s in metrics_service
              if all({**s["metadata"].get("labels", {}), **common_labels}.get(k) == v for k, v in wanted.items())]
    check(len(chosen) == 1, f"the ServiceMonitor selects {len(chosen)} metrics Services")
    check(all(e["port"] == "metrics" for e in monitor["spec"]["endpoints"]), "the ServiceMonitor scrapes another port")

env = {e["name"]: e.get("value") for e in container.get("env", [])}
config_path = env.get("WEIR_CONFIG")
check(config_path in mounts and mounts[config_path]["name"] == "config", f"WEIR_CONFIG={config_path} is not the mounted config")
config = tomllib.loads((base / "weir.toml").read_text())
check(config["data_dir"] in mounts and mounts[config["data_dir"]]["name"] == "data", f"data_dir {config['data_dir']} is not the data volume")
check(config["listen"].endswith(":4566") and config["metrics_listen"].endswith(":9464"), "listen addresses and container ports differ")
grace = pod["terminationGracePeriodSeconds"]
check(grace > config.get("shutdown_timeout_ms", 60000) / 1000, f"grace period {grace}s is within the shutdown timeout")

if problems:
    print("deploy/kubernetes:\n  " + "\n  ".join(problems))
    sys.exit(1)
print(f"deploy/kubernetes: {len(documents)} objects valid for Kubernetes 1.37 and consistent")
