#!/usr/bin/env python3
"""Checks deploy/kubernetes/ offline, as `kubectl apply -k` would need it to be:

- every resource kustomization.yaml lists exists and validates against Kubernetes' own schema
  (kubernetes-validate, strict: unknown fields are errors), the ConfigMap its generator makes too;
  the ServiceMonitor (a CRD, not in that schema) by its own few fields;
- the pieces agree: the probes ask /healthz and /readyz on the container's metrics port, the
  Services and the ServiceMonitor name ports the pod has, the volume mounts name volumes that
  exist, the config file sits where WEIR_CONFIG says, the data volume where weir.toml's data_dir
  says, and the grace period outlasts the stop's shutdown_timeout_ms;
- for an overlay (deploy/kubernetes/cluster: the base as resource `..`, strategic-merge patches
  applied as kustomize applies them: maps merged, lists of named items merged by name), the
  cluster's settings agree too: each node is named by its pod and advertises its name under the
  StatefulSet's headless Service, which publishes not-ready pods and the exchange port the
  container opens and WEIR_EXCHANGE_LISTEN names; WEIR_CLUSTER's etcd hosts are Services of the
  overlay with that port; a disruption budget selects the nodes. It prints the flags pod
  weir-0 gets (`cluster-flags: ...`), which tests/operations.rs gives to the binary's parser.

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


def merge(into, patch):
    """A strategic-merge patch as kustomize applies it to the objects here: maps merge, lists of
    maps with a `name` merge item by item, other values are replaced."""
    for key, value in patch.items():
        old = into.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            merge(old, value)
        elif (isinstance(old, list) and isinstance(value, list) and value
              and all(isinstance(v, dict) and "name" in v for v in old + value)):
            by_name = {item["name"]: item for item in old}
            for item in value:
                if item["name"] in by_name:
                    merge(by_name[item["name"]], item)
                else:
                    old.append(item)
        else:
            into[key] = value


def render(directory):
    """The kustomization in `directory` as (source, object) pairs, and the base's directory (the
    one whose resources are files: its weir.toml, its labels)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    documents, root = [], directory
    for name in kustomization["resources"]:
        if (directory / name).is_dir():
            inner, root = render(directory / name)
            documents += inner
            continue
        for doc in yaml.safe_load_all((directory / name).read_text()):
            documents.append((name, doc))
    for generator in kustomization.get("configMapGenerator", []):
        data = {pathlib.Path(f).name: (directory / f).read_text() for f in generator["files"]}
        documents.append(("configMapGenerator", {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": generator["name"]}, "data": data}))
    for patch in kustomization.get("patches", []):
        change = yaml.safe_load((directory / patch["path"]).read_text())
        targets = [doc for _, doc in documents
                   if doc["kind"] == change["kind"] and doc["metadata"]["name"] == change["metadata"]["name"]]
        check(len(targets) == 1, f"{patch['path']} patches {len(targets)} objects")
        for target in targets:
            merge(target, change)
    return documents, root


documents, root = render(base)
base_kustomization = yaml.safe_load((root / "kustomization.yaml").read_text())

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

(statefulset,) = [s for s in by_kind["StatefulSet"] if s["metadata"]["name"] == "weir"]
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
# Kustomize adds its common labels to every object.
common_labels = {k: v for entry in base_kustomization.get("labels", []) for k, v in entry["pairs"].items()}
weir_services = [s for s in by_kind["Service"] if s["spec"]["selector"].items() <= common_labels.items()]
for service in weir_services:
    for port in service["spec"]["ports"]:
        check(port["targetPort"] in ports, f"Service {service['metadata']['name']} targets {port['targetPort']}")
metrics_service = [s for s in weir_services if any(p["name"] == "metrics" for p in s["spec"]["ports"])]
for monitor in by_kind.get("ServiceMonitor", []):
    wanted = monitor["spec"]["selector"]["matchLabels"]
    chosen = [s for s in metrics_service
              if all({**s["metadata"].get("labels", {}), **common_labels}.get(k) == v for k, v in wanted.items())]
    check(len(chosen) == 1, f"the ServiceMonitor selects {len(chosen)} metrics Services")
    check(all(e["port"] == "metrics" for e in monitor["spec"]["endpoints"]), "the ServiceMonitor scrapes another port")

env = {e["name"]: e.get("value") for e in container.get("env", [])}
config_path = env.get("WEIR_CONFIG")
check(config_path in mounts and mounts[config_path]["name"] == "config", f"WEIR_CONFIG={config_path} is not the mounted config")
config = tomllib.loads((root / "weir.toml").read_text())
check(config["data_dir"] in mounts and mounts[config["data_dir"]]["name"] == "data", f"data_dir {config['data_dir']} is not the data volume")
check(config["listen"].endswith(":4566") and config["metrics_listen"].endswith(":9464"), "listen addresses and container ports differ")
grace = pod["terminationGracePeriodSeconds"]
check(grace > config.get("shutdown_timeout_ms", 60000) / 1000, f"grace period {grace}s is within the shutdown timeout")

values = {e["name"]: e for e in container.get("env", [])}
if "WEIR_CLUSTER" in env:
    services = {s["metadata"]["name"]: s for s in by_kind["Service"]}
    field = lambda name: values.get(name, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
    check(field("POD_NAME") == "metadata.name" and env.get("WEIR_NODE_ID") == "$(POD_NAME)",
          "each node is not named by its pod")
    headless = services.get(statefulset["spec"]["serviceName"], {}).get("spec", {})
    check(headless.get("clusterIP") == "None" and headless.get("publishNotReadyAddresses") is True,
          "the StatefulSet's Service is not headless or hides pods that are not ready")
    check(any(p["targetPort"] == "exchange" for p in headless.get("ports", [])), "the headless Service has no exchange port")
    listen = env.get("WEIR_EXCHANGE_LISTEN", "")
    check(ports.get("exchange") is not None and listen.endswith(f":{ports.get('exchange')}"),
          f"WEIR_EXCHANGE_LISTEN={listen} and the exchange port {ports.get('exchange')} differ")
    advertise = env.get("WEIR_ADVERTISE", "")
    check(advertise.startswith("$(POD_NAME).") and f".{statefulset['spec']['serviceName']}." in advertise + ".",
          f"WEIR_ADVERTISE={advertise} is not the pod's name under the headless Service")
    hosts = env["WEIR_CLUSTER"].removeprefix("etcd://").split("/")[0].split(",")
    for host in hosts:
        name, port = host.rsplit(":", 1)
        service = services.get(name.split(".")[1] if "." in name else name, {})
        check(any(str(p["port"]) == port for p in service.get("spec", {}).get("ports", [])),
              f"WEIR_CLUSTER names {host}, not a Service port of the overlay")
    budgets = by_kind.get("PodDisruptionBudget", [])
    check(any(b["spec"]["selector"]["matchLabels"].items() <= common_labels.items() for b in budgets),
          "no disruption budget selects the nodes")
    pod0 = lambda v: v.replace("$(POD_NAME)", "weir-0").replace("$(POD_NAMESPACE)", "default")
    flags = ["--cluster", env["WEIR_CLUSTER"], "--node-id", pod0(env["WEIR_NODE_ID"]), "--advertise",
             pod0(advertise), "--exchange-listen", listen, "--cluster-lease", env.get("WEIR_CLUSTER_LEASE", "2s")]
    print("cluster-flags: " + " ".join(flags))

if problems:
    print(f"{base}:\n  " + "\n  ".join(problems))
    sys.exit(1)
print(f"{base}: {len(documents)} objects valid for Kubernetes 1.37 and consistent")
