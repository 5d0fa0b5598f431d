"""The Kubernetes manifests of deploy/kubernetes/ (docs/deploy.md), as tests/deploy/deploy_test.sh
checks them. Runs in a virtual environment with PyPI's kubernetes-validate and kubeflow-training.

  manifests.py validate K8S_VERSION FILE...
      Every object against its schema, rejecting unknown fields: the built-in kinds against
      Kubernetes' own (kubernetes-validate), a PyTorchJob against Kubeflow's API types (the
      kubeflow-training SDK's models: every field known and of its type, the required ones given)
      and its pod templates against Kubernetes' PodTemplate schema.

  manifests.py pods FILE WORKDIR
      The pods the job of FILE would have, as JSON lines {name, hosts, env, argv}: the container's
      env as the manifest gives it plus what Kubernetes adds (JOB_COMPLETION_INDEX) or Kubeflow's
      training operator adds (its v1 rules: MASTER_ADDR/MASTER_PORT, WORLD_SIZE, RANK and PET_*,
      pkg/controller.v1/pytorch/envvar.go and master.go). The pod's volumes become folders under
      WORKDIR (a ConfigMap's files written out, a claim shared by all pods), and argv's paths under
      a mount point are rewritten to them.
"""
import json
import os
import re
import sys

import kubernetes_validate
import yaml
from kubeflow.training import models
from kubeflow.training.api_client import ApiClient

# ReplicaSpec.restartPolicy: "One of Always, OnFailure, Never and ExitCode" (the SDK's doc of it).
RESTART_POLICIES = {"Always", "OnFailure", "Never", "ExitCode"}
PYTORCH_REPLICA_TYPES = ("Master", "Worker")
SCALARS = {"str": str, "int": int, "bool": bool, "float": (int, float), "object": object}


def fail(msg):
    sys.exit(f"manifests.py: {msg}")


def documents(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def check_model(value, type_name, where, errors):
    """`value` against an SDK type name ('str', 'list[V1EnvVar]', 'KubeflowOrgV1ReplicaSpec'):
    unknown fields and wrong types go to errors."""
    if type_name.startswith("list["):
        if not isinstance(value, list):
            errors.append(f"{where}: expected a list, got {type(value).__name__}")
            return
        for i, v in enumerate(value):
            check_model(v, type_name[5:-1], f"{where}[{i}]", errors)
    elif type_name.startswith("dict("):
        if not isinstance(value, dict):
            errors.append(f"{where}: expected a map, got {type(value).__name__}")
            return
        inner = type_name[type_name.index(",") + 1:-1].strip()
        for k, v in value.items():
            check_model(v, inner, f"{where}.{k}", errors)
    elif type_name in SCALARS:
        if not isinstance(value, SCALARS[type_name]) or (type_name == "int" and isinstance(value, bool)):
            errors.append(f"{where}: expected {type_name}, got {value!r}")
    else:
        cls = getattr(models, type_name, None)
        if cls is None:
            errors.append(f"{where}: the SDK has no type {type_name}")
            return
        if not isinstance(value, dict):
            errors.append(f"{where}: expected an object ({type_name}), got {value!r}")
            return
        by_json_name = {j: p for p, j in cls.attribute_map.items()}
        for key, v in value.items():
            if key not in by_json_name:
                errors.append(f"{where}: unknown field '{key}' of {type_name}")
            else:
                check_model(v, cls.openapi_types[by_json_name[key]], f"{where}.{key}", errors)


def validate_pytorchjob(doc, version, name):
    errors = []
    check_model(doc, "KubeflowOrgV1PyTorchJob", name, errors)
    try:  # the SDK's constructors refuse a missing required field
        ApiClient()._ApiClient__deserialize(doc, "KubeflowOrgV1PyTorchJob")
    except ValueError as e:
        errors.append(f"{name}: {e}")
    specs = doc.get("spec", {}).get("pytorchReplicaSpecs", {})
    for rtype, spec in specs.items():
        where = f"{name}.spec.pytorchReplicaSpecs.{rtype}"
        if rtype not in PYTORCH_REPLICA_TYPES:
            errors.append(f"{where}: replica type must be one of {PYTORCH_REPLICA_TYPES}")
        if spec.get("restartPolicy", "Never") not in RESTART_POLICIES:
            errors.append(f"{where}.restartPolicy: one of {sorted(RESTART_POLICIES)}")
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"{rtype.lower()}"},
                    "template": spec.get("template", {})}
        try:
            kubernetes_validate.validate(template, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{where}.template: {e.message} at {'.'.join(map(str, e.path))}")
    return errors


def validate(version, files):
    bad = 0
    for path in files:
        for doc in documents(path):
            name = f"{os.path.basename(path)}: {doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
            if doc.get("apiVersion") == "kubeflow.org/v1" and doc.get("kind") == "PyTorchJob":
                errors = validate_pytorchjob(doc, version, name)
            else:
                errors = []
                try:
                    kubernetes_validate.validate(doc, version, strict=True)
                except kubernetes_validate.ValidationError as e:
                    errors.append(f"{name}: {e.message} at {'.'.join(map(str, e.path))}")
                except kubernetes_validate.SchemaNotFoundError:
                    errors.append(f"{name}: no Kubernetes {version} schema for this kind")
            for e in errors:
                print(e, file=sys.stderr)
            bad += len(errors)
            if not errors:
                print(f"{name}: valid")
    if bad:
        fail(f"{bad} schema errors")


# --- the pods a manifest's job has -------------------------------------------------------------

def resolve_env(container, pod_fields):
    """A container's env as the kubelet gives it: literal values and the fieldRefs a pod has."""
    env = {}
    for var in container.get("env", []):
        if "value" in var:
            if "$(" in var["value"]:
                fail(f"{var['name']}: $(VAR) references are not emulated")
            env[var["name"]] = var["value"]
            continue
        source = var.get("valueFrom", {})
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            if path not in pod_fields:
                fail(f"{var['name']}: fieldRef {path} is not emulated")
            env[var["name"]] = pod_fields[path]
        elif source.get("secretKeyRef", {}).get("optional"):
            continue  # an optional secret that the test cluster has not got
        else:
            fail(f"{var['name']}: valueFrom {list(source)} is not emulated")
    return env


def mount_volumes(pod_spec, container, workdir, pod, configmaps):
    """Folders standing for the container's mounts: {mountPath: folder}."""
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    mounts = {}
    for m in container.get("volumeMounts", []):
        v = volumes[m["name"]]
        if "emptyDir" in v:
            continue  # /dev/shm: the host's own
        if "persistentVolumeClaim" in v:
            folder = os.path.join(workdir, "claims", v["persistentVolumeClaim"]["claimName"])
        elif "configMap" in v:
            folder = os.path.join(workdir, pod, "configmaps", v["configMap"]["name"])
            os.makedirs(folder, exist_ok=True)
            for key, text in configmaps[v["configMap"]["name"]].items():
                with open(os.path.join(folder, key), "w") as f:
                    f.write(text)
        else:
            fail(f"volume {m['name']}: kind not emulated")
        os.makedirs(folder, exist_ok=True)
        mounts[m["mountPath"]] = folder
    return mounts


def container_argv(container, mounts):
    argv = container.get("command", []) + container.get("args", [])
    out = []
    for a in argv:
        for mount, folder in mounts.items():
            if a == mount or a.startswith(mount + "/"):
                a = folder + a[len(mount):]
        out.append(a)
    return out


def pytorchjob_pods(job, workdir, configmaps):
    """Kubeflow's training operator (v1): pod <job>-<type>-<index>, reachable by that name (a
    headless Service each), with the variables of setPodEnv: the master's (MASTER_*, WORLD_SIZE,
    RANK, PET_NODE_RANK...) when the job has a Master, the elastic policy's (elastic.go) when it has
    one."""
    spec = job["spec"]
    name = job["metadata"]["name"]
    specs = spec["pytorchReplicaSpecs"]
    elastic = spec.get("elasticPolicy")
    if "Master" not in specs and elastic is None:
        fail("a PyTorchJob without a Master or an elastic policy gets no rendezvous from the operator")
    total = sum(s.get("replicas", 1) for s in specs.values())
    nproc = spec.get("nprocPerNode", "auto")  # the operator's default

    def port_of(rtype):
        pod_spec = specs[rtype]["template"]["spec"]
        return next(p["containerPort"] for c in pod_spec["containers"] if c["name"] == "pytorch"
                    for p in c.get("ports", []) if p.get("name") == "pytorchjob-port")

    pods = []
    for rtype in PYTORCH_REPLICA_TYPES:
        for index in range(specs.get(rtype, {}).get("replicas", 0)):
            pod = f"{name}-{rtype.lower()}-{index}"
            pod_spec = specs[rtype]["template"]["spec"]
            container = next(c for c in pod_spec["containers"] if c["name"] == "pytorch")
            env = resolve_env(container, {"metadata.name": pod})
            env.update({"PYTHONUNBUFFERED": "1", "PET_NPROC_PER_NODE": nproc})
            if "Master" in specs:
                port = port_of("Master")
                rank = index + (1 if rtype == "Worker" else 0)
                env.update({
                    "MASTER_PORT": str(port), "PET_MASTER_PORT": str(port),
                    "MASTER_ADDR": f"{name}-master-0", "PET_MASTER_ADDR": f"{name}-master-0",
                    "WORLD_SIZE": str(total * (int(nproc) if nproc.isdigit() else 1)),
                    "RANK": str(rank), "PET_NODE_RANK": str(rank),
                    "PET_NNODES": str(total),
                })
            if elastic is not None:
                host = elastic.get("rdzvHost", f"{name}-worker-0")
                env["PET_RDZV_ENDPOINT"] = f"{host}:{elastic.get('rdzvPort', port_of('Worker'))}"
                env["PET_RDZV_BACKEND"] = elastic.get("rdzvBackend", "c10d")
                if "minReplicas" in elastic or "maxReplicas" in elastic:
                    env["PET_NNODES"] = f"{elastic['minReplicas']}:{elastic['maxReplicas']}"
                else:
                    env["PET_NNODES"] = str(specs["Worker"]["replicas"])
                if "maxRestarts" in elastic:
                    env["PET_MAX_RESTARTS"] = str(elastic["maxRestarts"])
                if "rdzvId" in elastic:
                    env["PET_RDZV_ID"] = elastic["rdzvId"]
                if elastic.get("rdzvConf"):
                    env["PET_RDZV_CONF"] = ",".join(f"{c['key']}={c['value']}" for c in elastic["rdzvConf"])
                if elastic.get("standalone"):
                    env["PET_STANDALONE"] = ""
            mounts = mount_volumes(pod_spec, container, workdir, pod, configmaps)
            pods.append({"name": pod, "hosts": [pod], "env": env, "argv": container_argv(container, mounts)})
    return pods


def indexed_job_pods(job, workdir, configmaps):
    """A batch/v1 Job with completionMode Indexed: pod <job>-<index> (its hostname), reachable as
    <job>-<index>.<subdomain> through the headless Service; Kubernetes sets JOB_COMPLETION_INDEX and
    the annotation batch.kubernetes.io/job-completion-index."""
    spec = job["spec"]
    if spec.get("completionMode") != "Indexed":
        fail(f"job {job['metadata']['name']} is not Indexed")
    name = job["metadata"]["name"]
    pod_spec = spec["template"]["spec"]
    pods = []
    for index in range(spec["completions"]):
        pod = f"{name}-{index}"
        fields = {"metadata.name": pod,
                  "metadata.annotations['batch.kubernetes.io/job-completion-index']": str(index)}
        container = pod_spec["containers"][0]
        env = resolve_env(container, fields)
        env["JOB_COMPLETION_INDEX"] = str(index)
        mounts = mount_volumes(pod_spec, container, workdir, pod, configmaps)
        hosts = [pod] + ([f"{pod}.{pod_spec['subdomain']}"] if "subdomain" in pod_spec else [])
        pods.append({"name": pod, "hosts": hosts, "env": env, "argv": container_argv(container, mounts)})
    return pods


def pods(path, workdir, common):
    docs = documents(path) + [d for f in common for d in documents(f)]
    configmaps = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    for doc in documents(path):
        if doc["kind"] == "PyTorchJob":
            found = pytorchjob_pods(doc, workdir, configmaps)
        elif doc["kind"] == "Job":
            found = indexed_job_pods(doc, workdir, configmaps)
        else:
            continue
        for p in found:
            print(json.dumps(p))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "validate":
        validate(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "pods":
        pods(sys.argv[2], sys.argv[3], sys.argv[4:])
    else:
        fail("usage: manifests.py validate K8S_VERSION FILE... | pods FILE WORKDIR [COMMON_FILE...]")
