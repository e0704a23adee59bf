/**
 * A trainer that follows the trainer contract (control-plane/src/training/contract.ts) with busybox sh:
 * reads its hyperparameters (ANVIL_HP_*) and dataset, reports metrics per step, writes a checkpoint
 * directory at the end of each epoch and on SIGTERM (then exits 0), and resumes from ANVIL_RESUME_FROM.
 * config.parameters: steps_per_epoch (default 2), step_seconds (default 0.2), resumed_step_seconds (the
 * pause per step once resumed; default step_seconds), exit_code (default 0).
 */
export const TRAINER_SCRIPT = `
lr=\${ANVIL_HP_LEARNING_RATE:-0.01}
epochs=\${ANVIL_HP_EPOCHS:-2}
steps=\${ANVIL_HP_STEPS_PER_EPOCH:-2}
pause=\${ANVIL_HP_STEP_SECONDS:-0.2}
examples=$(wc -l < "$ANVIL_DATASET_FILE")
echo "trainer rank $ANVIL_RANK of $ANVIL_WORLD_SIZE attempt $ANVIL_ATTEMPT examples $examples lr $lr"
step=0
if [ -n "$ANVIL_RESUME_FROM" ]; then
  step=$(cat "$ANVIL_RESUME_FROM/step"); echo "resumed from step $step"; pause=\${ANVIL_HP_RESUMED_STEP_SECONDS:-$pause}
fi
total=$((epochs * steps))
stop=0
trap 'stop=1' TERM
report() { [ "$ANVIL_RANK" = 0 ] && echo "ANVIL_REPORT $1"; }
checkpoint() {
  d="$ANVIL_CHECKPOINT_DIR/step-$step"; mkdir -p "$d"; echo "$step" > "$d/step"
  report "{\\"type\\":\\"checkpoint\\",\\"path\\":\\"step-$step\\",\\"step\\":$step,\\"epoch\\":$epoch,\\"loss\\":$loss,\\"size_bytes\\":$(wc -c < "$d/step")}"
}
epoch=$(( step / steps )); loss=1
while [ $step -lt $total ]; do
  step=$((step + 1))
  epoch=$(( (step + steps - 1) / steps ))
  loss=$(awk "BEGIN{print 1/($step+1) + $lr}")
  report "{\\"type\\":\\"metrics\\",\\"step\\":$step,\\"epoch\\":$epoch,\\"total_steps\\":$total,\\"loss\\":$loss,\\"learning_rate\\":$lr,\\"throughput\\":$examples}"
  if [ $((step % steps)) -eq 0 ]; then checkpoint; fi
  if [ $stop = 1 ]; then checkpoint; echo "checkpointed on SIGTERM"; exit 0; fi
  sleep "$pause"
  if [ $stop = 1 ]; then checkpoint; echo "checkpointed on SIGTERM"; exit 0; fi
done
exit \${ANVIL_HP_EXIT_CODE:-0}
`;
