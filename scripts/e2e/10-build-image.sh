#!/usr/bin/env bash
# Builds the image from the Dockerfile (one image for operator and brokers) and loads it into kind.
# E2E_SKIP_BUILD=1 only loads an image that is already built.
source "$(dirname "$0")/lib.sh"
need docker "to build the image"
if [[ "${E2E_SKIP_BUILD:-0}" != 1 ]]; then
    step "docker build -t ${E2E_IMAGE}"
    start=$SECONDS
    DOCKER_BUILDKIT=1 docker build -t "$E2E_IMAGE" "$ROOT"
    ok "built in $((SECONDS - start)) s"
fi
step "smoke test: the image runs as non-root"
docker run --rm "$E2E_IMAGE" --version
user="$(docker image inspect -f '{{.Config.User}}' "$E2E_IMAGE")"
[[ "$user" == "65532:65532" ]] || die "image user is '${user}', expected 65532:65532"
ok "evenkeel runs, user ${user}"
step "kind load docker-image ${E2E_IMAGE}"
kind_ load docker-image "$E2E_IMAGE" --name "$KIND_CLUSTER"
ok "loaded into every node of ${KIND_CLUSTER}"
