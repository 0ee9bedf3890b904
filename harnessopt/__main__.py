from harnessopt.cli import main
from harnessopt.util import interrupts

code = main()
interrupts.last_words()  # a stop signal in the interpreter's teardown: a line, not a silent exit
raise SystemExit(code)
