"""What a round optimizes (``objective: task | trigger | both``, docs/workspace.md "Objectives").

``trigger``: trigger tasks, whether the target agent loaded the skill and the built-in score of
that (``trigger``); ``fields``: the copy-back rule of trigger rounds (only the description fields
of SKILL.md's front matter change); ``metrics``: precision, recall and the pass rate by loading.
"""
