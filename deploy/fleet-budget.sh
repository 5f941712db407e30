#!/usr/bin/env bash
# deploy/fleet-budget.sh: sets a memory budget on one artifact on every NPU
# node, one Job per node (deploy/kubernetes/jobs/budget-job.yaml), and prints
# each node's result. See docs/deploying.md, "The budget Job".
#
#   deploy/fleet-budget.sh --artifact NAME --budget BUDGET [--selector LABELS]
#                          [--image IMAGE] [--timeout SECONDS]
#   deploy/fleet-budget.sh --render --nodes "NODE..." --artifact NAME --budget BUDGET
#
# NAME is the artifact's path in the store (/var/lib/rbln-artifactd/NAME on
# each node); BUDGET as rbln-artifact takes it (0.8, 80%, 10GiB). --render
# prints the Jobs for the given nodes and touches no cluster.
# --timeout bounds each Job (activeDeadlineSeconds) and the wait for all of
# them; RESULT is succeeded, failed or timeout.
# Exit: 0 every node succeeded, 1 some node failed or timed out, 2 usage.
set -euo pipefail

template="$(cd "$(dirname "$0")" && pwd)/kubernetes/jobs/budget-job.yaml"
namespace=rbln-artifactd
selector=rbln-artifactd/npu=true
image=""
artifact=""
budget=""
nodes=""
render=false
timeout=900

usage() {
  echo "usage: $0 --artifact NAME --budget BUDGET [--selector LABELS] [--image IMAGE] [--timeout SECONDS]" >&2
  echo "       $0 --render --nodes \"NODE...\" --artifact NAME --budget BUDGET [--image IMAGE] [--timeout SECONDS]" >&2
  exit 2
}

while [ $# -gt 0 ]; do
  case $1 in
    --artifact) artifact=${2:-}; shift 2 ;;
    --budget) budget=${2:-}; shift 2 ;;
    --selector) selector=${2:-}; shift 2 ;;
    --image) image=${2:-}; shift 2 ;;
    --nodes) nodes=${2:-}; shift 2 ;;
    --timeout) timeout=${2:-}; shift 2 ;;
    --render) render=true; shift ;;
    -h|--help) sed -n '2,16s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "$0: unknown argument '$1'" >&2; usage ;;
  esac
done
if [ -z "$artifact" ] || [ -z "$budget" ]; then usage; fi
# The values go into YAML and a path: nothing that could change either.
if ! [[ $artifact =~ ^[A-Za-z0-9._][A-Za-z0-9._/-]*$ ]] || [[ $artifact == *..* ]]; then
  echo "$0: --artifact '$artifact': give a path inside the store (letters, digits, . _ - /, no ..)" >&2
  exit 2
fi
if [ -n "$image" ] && ! [[ $image =~ ^[A-Za-z0-9][A-Za-z0-9./:@_-]*$ ]]; then
  echo "$0: --image '$image' is not an image reference" >&2
  exit 2
fi
if ! [[ $timeout =~ ^[1-9][0-9]*$ ]]; then
  echo "$0: --timeout '$timeout': give whole seconds (900)" >&2
  exit 2
fi
if ! [[ $budget =~ ^[0-9.]+(%|[KMGT]i?B|B)?$ ]]; then
  echo "$0: --budget '$budget': give a fraction (0.8), a percentage (80%) or bytes with a unit (10GiB)" >&2
  exit 2
fi

# A run's Jobs share this id (a label), so that a run is listed and cleaned
# up as one.
run=$(date -u +%Y%m%d%H%M%S)

# render NODE INDEX: one Job.
render_job() {
  sed -e "s|@RUN@|$run|g" -e "s|@INDEX@|$2|g" -e "s|@NODE@|$1|g" \
    -e "s|@ARTIFACT@|$artifact|g" -e "s|@BUDGET@|$budget|g" \
    -e "s|activeDeadlineSeconds: 900|activeDeadlineSeconds: $timeout|" \
    ${image:+-e "s|image: rbln-artifactd:latest|image: $image|"} "$template"
}

render_all() {
  local index=0 node
  for node in $nodes; do
    if ! [[ $node =~ ^[a-z0-9]([a-z0-9.-]*[a-z0-9])?$ ]]; then
      echo "$0: '$node' is not a node name" >&2
      exit 2
    fi
    [ $index -eq 0 ] || echo "---"
    render_job "$node" "$index"
    index=$((index + 1))
  done
}

if $render; then
  [ -n "$nodes" ] || usage
  render_all
  exit 0
fi

command -v kubectl >/dev/null || {
  echo "$0: kubectl is not installed" >&2
  exit 2
}
nodes=$(kubectl get nodes -l "$selector" -o jsonpath='{.items[*].metadata.name}')
if [ -z "$nodes" ]; then
  echo "$0: no node has the labels $selector (label the NPU nodes, or give --selector)" >&2
  exit 1
fi
render_all | kubectl apply -f - >&2

# Each Job ends Complete or Failed (backoffLimit 0); wait for all, bounded.
deadline=$((SECONDS + timeout))
failed=0
printf '%-32s %-9s %s\n' NODE RESULT OUTPUT
index=0
for node in $nodes; do
  job=rbln-budget-$run-$index
  index=$((index + 1))
  state=""
  while [ $SECONDS -lt $deadline ]; do
    state=$(kubectl -n "$namespace" get job "$job" \
      -o jsonpath='{range .status.conditions[?(@.status=="True")]}{.type} {end}' || true)
    case $state in
      *Complete*) state=succeeded; break ;;
      *Failed*) state=failed; break ;;
    esac
    sleep 2
  done
  case $state in
    succeeded | failed) ;;
    *) state=timeout ;;
  esac
  [ "$state" = succeeded ] || failed=1
  # rbln-artifact --json prints one JSON object: the result, or the error.
  output=$(kubectl -n "$namespace" logs "job/$job" --tail=20 2>&1 | tr '\n' ' ')
  printf '%-32s %-9s %s\n' "$node" "$state" "$output"
done
echo "Jobs: kubectl -n $namespace get jobs -l rbln-artifactd/run=$run" >&2
exit $failed
