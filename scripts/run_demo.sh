#!/usr/bin/env bash
# Runs the main job: parameter-server training of a CNN on Fashion-MNIST —
# one server and two trainers as local processes under tessera-run.
# Extra arguments go to the example (e.g. --epochs 3, --optimizer sgd).
# Trainers are elastic: `kill -9` one and tessera-run starts it again alone;
# it rejoins the running server, which never restarts (docs/guide/failures.md).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh
bazel build //launcher:tessera-run //examples/parameter_server
trainers="${TESSERA_TRAINERS:-2}"
exec bazel-bin/launcher/tessera-run --standalone --nproc_per_node "$((trainers + 1))" \
    --elastic_roles trainer --max_restarts 3 \
    bazel-bin/examples/parameter_server/parameter_server "$@"
