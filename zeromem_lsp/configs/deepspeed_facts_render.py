"""Kept so `python -m zeromem_lsp.configs.deepspeed_facts_render --write` still works; see deepspeed/facts_render.py."""

if __name__ == "__main__":
    from zeromem_lsp.configs.deepspeed.facts_render import main

    import sys

    raise SystemExit(main(sys.argv[1:]))
