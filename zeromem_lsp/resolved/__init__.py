"""Resolved settings → the memory plan's inputs: a reader's plan source and the settings resolved once
(configs/layers.py) become the plan (`planner`) and the peak's inputs (`peak_inputs`), each with its origin."""
