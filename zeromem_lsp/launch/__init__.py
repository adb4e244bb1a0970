"""What a recipe is launched with: `accelerate.py` pairs it with its Accelerate config."""
