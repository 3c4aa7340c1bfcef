#!/usr/bin/env bash
# The deployment files of deploy/: the Kubernetes manifests parse as YAML and hold what a job
# needs (headless service, a StatefulSet with /dev/shm in memory, the configuration, which
# rekindled accepts); the systemd unit passes systemd-analyze verify and asks for readiness; the
# Slurm script is valid bash and refuses to run outside a job.
#
# usage: deploy_test.sh SOURCE_DIR REKINDLED
set -euo pipefail
. "$(dirname "$0")/lib.sh"
src=$1
rekindled=$2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# ---- Kubernetes ----
require_tool python3 python3
require_tool systemd-analyze systemd
/usr/bin/python3 - "$src/deploy/kubernetes" "$dir" <<'PY' || fail "the Kubernetes manifests"
import pathlib, sys, yaml
folder, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
docs = []
for f in sorted(folder.glob("*.yaml")):
    docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
kinds = {d["kind"]: d for d in docs}
for kind in ("ConfigMap", "Service", "StatefulSet"):
    assert kind in kinds, f"no {kind} in {folder}"
svc = kinds["Service"]
assert svc["spec"]["clusterIP"] == "None", "the service must be headless (a DNS name per pod)"
assert svc["spec"].get("publishNotReadyAddresses") is True, "pods must find each other before they are ready"
sts = kinds["StatefulSet"]["spec"]
assert sts["serviceName"] == svc["metadata"]["name"], "the StatefulSet's serviceName is not the headless service"
pod = sts["template"]["spec"]
shm = [v for v in pod["volumes"] if v["name"] == "shm"]
assert shm and shm[0]["emptyDir"]["medium"] == "Memory", "/dev/shm must be an emptyDir in memory (the snapshot slots)"
mounts = {m["mountPath"] for c in pod["containers"] for m in c["volumeMounts"]}
assert "/dev/shm" in mounts, "/dev/shm is not mounted"
toml = kinds["ConfigMap"]["data"]["cluster.toml"]
(out / "cluster.toml").write_text(toml)
# Every pod of the StatefulSet is a node of the configuration.
names = [f"{kinds['StatefulSet']['metadata']['name']}-{i}" for i in range(sts["replicas"])]
for n in names:
    assert f'name = "{n}"' in toml, f"pod {n} is not a node of cluster.toml"
(out / "nodes").write_text("\n".join(names) + "\n")
PY
"$rekindled" --check-config "$dir/cluster.toml" >"$dir/effective.toml" 2>"$dir/check.err" ||
  fail "rekindled refuses the ConfigMap's cluster.toml: $(cat "$dir/check.err")"
grep -q 'bind = "0.0.0.0"' "$dir/effective.toml" || fail "the pods' daemons do not listen on every address"
echo "kubernetes: ok ($(wc -l <"$dir/nodes") pods)"

# ---- systemd ----
unit=$src/deploy/systemd/rekindled.service
grep -q '^Type=notify$' "$unit" || fail "the unit does not wait for the daemon's readiness (Type=notify)"
# Verified with ExecStart pointing at this build's daemon (verify checks the program exists).
sed "s|/usr/local/bin/rekindled|$rekindled|" "$unit" >"$dir/rekindled.service"
out=$(SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "$dir/rekindled.service" 2>&1) || fail "systemd-analyze verify: $out"
echo "$out" | grep -v -e 'network-online.target' -e '^$' | grep -q . && fail "systemd-analyze verify warns: $out"
echo "systemd: ok"

# ---- Slurm ----
sbatch_script=$src/deploy/slurm/rekindle.sbatch
bash -n "$sbatch_script" || fail "rekindle.sbatch is not valid bash"
code=0
out=$(env -u SLURM_JOB_ID -u SLURM_JOB_NODELIST bash "$sbatch_script" "$dir/cluster.toml" 2>&1) || code=$?
[ "$code" -eq 2 ] && echo "$out" | grep -q "not inside a Slurm job" || fail "outside a job: exit $code, '$out'"
echo "slurm script: ok"
