#!/usr/bin/env bash
# A kind cluster with the controller and the example box (make kind-up):
#   1. the kind cluster from kind-config.yaml (created if missing; KIND_CLUSTER, default agentbox);
#   2. both images built (hack/images.sh) and loaded into the cluster's nodes (nothing is pulled);
#   3. the chart installed in agentbox-system, watching BOX_NAMESPACE (default: default);
#   4. the login Secret from LOGIN_FILE (default ~/.claude/.credentials.json; on macOS export it from the
#      Keychain first, see docs/logins.md), the example Subscription and the example box applied.
# Every kubectl/helm call names the kind context: no other cluster is touched.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${CONTROLLER_IMAGE:?}" "${BOX_IMAGE:?}"
cluster=${KIND_CLUSTER:-agentbox}
ns=${BOX_NAMESPACE:-default}
login=${LOGIN_FILE:-$HOME/.claude/.credentials.json}
ctx="kind-$cluster"

for tool in kind kubectl; do
  command -v "$tool" >/dev/null 2>&1 || { echo "make kind-up: '$tool' not found (https://kind.sigs.k8s.io, https://kubernetes.io/docs/tasks/tools/)" >&2; exit 2; }
done

builder=$(hack/images.sh "$CONTROLLER_IMAGE" "$BOX_IMAGE" | tee /dev/stderr | sed -n 's/^builder: //p' | tail -1)
[ "$builder" = podman ] && export KIND_EXPERIMENTAL_PROVIDER=podman

if ! kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  kind create cluster --name "$cluster" --config kind-config.yaml
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for ref in "$CONTROLLER_IMAGE" "$BOX_IMAGE"; do
  case "$builder" in
    docker)  kind load docker-image "$ref" --name "$cluster" ;;
    podman)  podman save "$ref" -o "$tmp/image.tar" && kind load image-archive "$tmp/image.tar" --name "$cluster" ;;
    buildah) buildah push "$ref" "docker-archive:$tmp/image.tar:$ref" && kind load image-archive "$tmp/image.tar" --name "$cluster" ;;
  esac
  rm -f "$tmp/image.tar"
done

repo=${CONTROLLER_IMAGE%:*}
tag=${CONTROLLER_IMAGE##*:}
kubectl --context "$ctx" create namespace "$ns" --dry-run=client -o yaml | kubectl --context "$ctx" apply -f -
if command -v helm >/dev/null 2>&1; then
  helm --kube-context "$ctx" upgrade --install agentbox charts/agentbox-controller \
    --namespace agentbox-system --create-namespace \
    --set image.repository="$repo" --set image.tag="$tag" --set "watchNamespaces={$ns}" --wait
else
  echo "helm not found: rendering the chart with the project's embedded Helm SDK (.venv) and applying it"
  kubectl --context "$ctx" create namespace agentbox-system --dry-run=client -o yaml | kubectl --context "$ctx" apply -f -
  .venv/bin/python - "$repo" "$tag" "$ns" > "$tmp/chart.yaml" <<'PY'
import sys
import helm_python as helm
repo, tag, ns = sys.argv[1:]
out = helm.Chart.load("charts/agentbox-controller").render(
    {"image": {"repository": repo, "tag": tag}, "watchNamespaces": [ns]},
    name="agentbox", namespace="agentbox-system", is_install=True)
print("\n---\n".join(doc for path, doc in sorted(out.items())  # manifests only: no NOTES, no `helm test` pods
                     if path.endswith(".yaml") and "/tests/" not in path and doc.strip()))
PY
  kubectl --context "$ctx" apply -f "$tmp/chart.yaml"
  kubectl --context "$ctx" -n agentbox-system rollout status deploy/agentbox-agentbox-controller --timeout=180s
fi

if [ -s "$login" ]; then
  kubectl --context "$ctx" -n "$ns" create secret generic claude-login --from-file=credentials.json="$login" \
    --dry-run=client -o yaml | kubectl --context "$ctx" apply -f -
else
  echo "no login file at $login: the box will show SecretNotFound until you create the Secret" >&2
  echo "  (docs/logins.md: a dedicated login; on macOS export it from the Keychain; LOGIN_FILE=... make kind-up)" >&2
fi
sed "s#ghcr.io/agentbox-dev/agentbox-box:[^ ]*#$BOX_IMAGE#" examples/claude-box.yaml > "$tmp/box.yaml"
kubectl --context "$ctx" -n "$ns" apply -f examples/claude-subscription.yaml -f "$tmp/box.yaml"
echo
echo "kind-up: done. kubectl --context $ctx -n $ns get asub,abox"
echo "         attach: kubectl --context $ctx -n $ns exec -it claude-box -- tmux attach -t agentbox"
