#!/usr/bin/env bash
# SCGS against its controls: ERM on the -10 config, then the SCGS config and its three controls
# (random blobs of the CAM mask's area, the CAM mask shifted, no mask), each trained with the same
# seeds, and worst-group test accuracy side by side.
#
#   examples/scgs_compare.sh OUT/hard-spurious-imagenet-10 WORK [SEEDS]
#
# Environment: MODEL (timm architecture, default resnet50), PRETRAINED (default --pretrained: timm's
# ImageNet weights from the local cache; empty: from scratch), SD_MODEL (a local diffusers folder or a
# cached hub id), STEPS (diffusion steps, default 30), EPOCHS, LR, DEVICE.
set -euo pipefail

SOURCE=${1:?usage: scgs_compare.sh SOURCE_CONFIG_FOLDER WORK [SEEDS]}
WORK=${2:?usage: scgs_compare.sh SOURCE_CONFIG_FOLDER WORK [SEEDS]}
SEEDS=${3:-3}
MODEL=${MODEL:-resnet50}
SD_MODEL=${SD_MODEL:-stable-diffusion-v1-5/stable-diffusion-inpainting}
DEVICE=${DEVICE:-auto}
PRETRAINED=${PRETRAINED---pretrained}
TRAIN=(--model "$MODEL" $PRETRAINED --epochs "${EPOCHS:-30}" --lr "${LR:-0.01}" --seeds "$SEEDS" --device "$DEVICE")
BASE=$(basename "$SOURCE")

# 1. ERM on the source config; seed 0's selected weights are the model SCGS learns from.
hsi train "$SOURCE" --out "$WORK/runs/$BASE" "${TRAIN[@]}"
ERM="$WORK/runs/$BASE/erm/seed-0/best.pt"

# 2. The SCGS config and its controls: same ERM model, sampled images, prompts and seeds.
CONFIGS=("$BASE")
for MASK in cam random shifted none; do
    hsi scgs "$SOURCE" --out "$WORK/data" --checkpoint "$ERM" --sd-model "$SD_MODEL" --mask "$MASK" \
        --clusters 5 --fraction 0.2 --per-image 1 --threshold 0.7 --steps "${STEPS:-30}" --guidance 7.5 --strength 0.9 \
        --keep all --seed 0 --device "$DEVICE"
    NAME="$BASE-scgs"
    [ "$MASK" = cam ] || NAME="$NAME-$MASK"
    hsi validate "$WORK/data/$NAME"
    # 3. ERM on each augmented train split, the same seeds; val and test are the source's.
    hsi train "$WORK/data/$NAME" --out "$WORK/runs/$NAME" "${TRAIN[@]}"
    CONFIGS+=("$NAME")
done

# 4. Per config: mean ± std over seeds of the test split's mean and worst-group accuracy.
for NAME in "${CONFIGS[@]}"; do
    hsi train --report "$WORK/runs/$NAME/erm" --out "$WORK/summary/$NAME" > /dev/null
done
python - "$WORK/summary" "${CONFIGS[@]}" <<'PY'
import json, sys
from pathlib import Path

root, names = Path(sys.argv[1]), sys.argv[2:]
print(f"{'train config':<48} {'worst group (test)':>20} {'mean (test)':>16}")
for name in names:
    erm = json.loads((root / name / "train_summary.json").read_text())["methods"][0]
    w, m = erm["worst_group"], erm["mean"]
    print(f"{name:<48} {100 * w['mean']:>12.1f} ± {100 * w['std']:<5.1f} {100 * m['mean']:>8.1f} ± {100 * m['std']:.1f}")
PY
