-- Neovim >= 0.11: put this directory on 'runtimepath' (or copy this file to ~/.config/nvim/lsp/),
-- then `vim.lsp.enable("zeromem")`. Override with vim.lsp.config("zeromem", { settings = ... }).
return {
  cmd = { "zeromem", "serve" },
  filetypes = { "json", "jsonc", "yaml" },
  root_markers = { "zeromem.toml", "pyproject.toml", ".git" },
  settings = {
    zeromem = {
      -- gpu_memory = "80GiB", parameters = "7B", world_size = 8,
      -- precision = "bf16", optimizer = "adamw", warn_fraction = 0.9,
    },
  },
}
