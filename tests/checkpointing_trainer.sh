# A trainer for the checkpoint tests (tests/dagster/checkpoint_jobs.py and
# tests/e2e/dagster_recovery/definitions.py): it checkpoints every 10 steps into
# AIRO_CHECKPOINT_DIR (a file step-<n>) and resumes from the newest there; each execution
# appends its first step, folder and resume variables under COUNT_DIR; the first to reach
# step 73 stays there (touching at73) until the test takes its node away.
start=0
newest=$(ls "$AIRO_CHECKPOINT_DIR" | sed -n 's/^step-//p' | sort -n | tail -1)
if [ -n "$newest" ]; then start=$newest; fi
echo "$start" >> "$COUNT_DIR/starts"
echo "$AIRO_CHECKPOINT_DIR" >> "$COUNT_DIR/dirs"
echo "resuming=$AIRO_RESUMING step=${AIRO_RESUME_STEP:-}" >> "$COUNT_DIR/resume"
step=$start
while [ "$step" -lt 100 ]; do
  step=$((step + 1))
  echo "$step" >> "$COUNT_DIR/steps"
  if [ $((step % 10)) = 0 ]; then
    echo "$step" > "$AIRO_CHECKPOINT_DIR/step-$step.tmp" && mv "$AIRO_CHECKPOINT_DIR/step-$step.tmp" "$AIRO_CHECKPOINT_DIR/step-$step"
  fi
  if [ "$step" = 73 ] && [ ! -e "$COUNT_DIR/at73" ]; then
    touch "$COUNT_DIR/at73"
    while true; do sleep 0.05; done
  fi
done
