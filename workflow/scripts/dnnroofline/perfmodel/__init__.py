"""The performance model, after measurement: op-class tables and their shape fit, the
step prediction, its transfer to another GPU, scoring, leave-one-out, and the levers."""
