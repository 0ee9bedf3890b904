"""Upper bounds on counts a user types (flags and harnessopt.yaml): a count past one is a typo, not
a plan, and would otherwise exhaust memory before anything ran. Light on imports: the CLI's
parser reads them."""

MAX_ROUNDS = 10_000  # run --rounds: each round runs a batch, an optimizer turn and a validation
MAX_RUNS_A_TASK = 100  # gate.epochs and its kin, audit --epochs: runs of one task in one validation
