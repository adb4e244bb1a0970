-- zeromem language server for Neovim.
--
--   require("zeromem").setup({
--     cmd = { "zeromem", "serve" },              -- or { "/path/to/python", "-m", "zeromem_lsp", "serve" }
--     settings = { gpu_memory = "80GiB", parameters = "7B", world_size = 8 },
--   })
--
-- Neovim >= 0.11: vim.lsp.config() + vim.lsp.enable(). Neovim 0.8–0.10: vim.lsp.start() from a
-- FileType autocmd. Neovim 0.7: vim.lsp.start_client() + vim.lsp.buf_attach_client().
local M = {}

M.name = "zeromem"

M.defaults = {
  cmd = { "zeromem", "serve" },
  filetypes = { "json", "jsonc", "yaml" },
  root_markers = { "zeromem.toml", "pyproject.toml", ".git" },
  -- the server's settings (workspace/configuration section "zeromem" and initializationOptions):
  -- gpu_memory, parameters, world_size, precision, optimizer, warn_fraction (camelCase works too)
  settings = {},
}

local function has(version)
  return vim.fn.has("nvim-" .. version) == 1
end

local function merge(opts)
  local config = vim.tbl_deep_extend("force", {}, M.defaults, opts or {})
  -- the settings go both ways: initializationOptions, and the "zeromem" section that the server asks for
  config.init_options = vim.tbl_deep_extend("force", {}, config.settings, config.init_options or {})
  config.settings = { zeromem = config.settings }
  return config
end

--- The config table for vim.lsp.config("zeromem", ...) (Neovim >= 0.11) or vim.lsp.start().
function M.config(opts)
  local config = merge(opts)
  return {
    name = M.name,
    cmd = config.cmd,
    filetypes = config.filetypes,
    root_markers = config.root_markers,
    settings = config.settings,
    init_options = config.init_options,
    on_attach = config.on_attach,
    capabilities = config.capabilities,
  }
end

-- the nearest directory at or above the buffer's file holding one of `markers`, else the file's directory
local function find_root(bufnr, markers)
  local file = vim.api.nvim_buf_get_name(bufnr)
  if file == "" then
    return vim.loop.cwd()
  end
  local start = vim.fn.fnamemodify(file, ":p:h")
  local dir = start
  while true do
    for _, marker in ipairs(markers) do
      if vim.loop.fs_stat(dir .. "/" .. marker) then
        return dir
      end
    end
    local parent = vim.fn.fnamemodify(dir, ":h")
    if parent == dir then
      return start
    end
    dir = parent
  end
end

local clients_by_root = {} -- Neovim 0.7: one client per root directory

local function start_legacy(bufnr, config)
  local root = find_root(bufnr, config.root_markers)
  local id = clients_by_root[root]
  if id == nil or vim.lsp.get_client_by_id(id) == nil then
    id = vim.lsp.start_client({
      name = config.name,
      cmd = config.cmd,
      root_dir = root,
      workspace_folders = { { uri = vim.uri_from_fname(root), name = root } },
      settings = config.settings,
      init_options = config.init_options,
      on_attach = config.on_attach,
      capabilities = config.capabilities,
    })
    if id == nil then
      vim.notify("zeromem: cannot start " .. table.concat(config.cmd, " ")
        .. " — install it (pip install /path/to/zeromem-lsp: a clone, it is not on PyPI) or pass cmd to require('zeromem').setup()",
        vim.log.levels.ERROR)
      return nil
    end
    clients_by_root[root] = id
  end
  vim.lsp.buf_attach_client(bufnr, id)
  return id
end

--- Start (or reuse) the zeromem client for `bufnr`; returns its id. For Neovim < 0.11.
function M.start(bufnr, opts)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local config = M.config(opts)
  if vim.fn.executable(config.cmd[1]) == 0 then
    vim.notify("zeromem: " .. config.cmd[1] .. " is not executable — install the server (pip install /path/to/zeromem-lsp) "
      .. "or pass cmd = { '/path/to/python', '-m', 'zeromem_lsp', 'serve' } to require('zeromem').setup()",
      vim.log.levels.ERROR)
    return nil
  end
  if has("0.8") then
    return vim.lsp.start({
      name = config.name,
      cmd = config.cmd,
      root_dir = find_root(bufnr, config.root_markers),
      settings = config.settings,
      init_options = config.init_options,
      on_attach = config.on_attach,
      capabilities = config.capabilities,
    }, { bufnr = bufnr })
  end
  return start_legacy(bufnr, config)
end

--- Configure and enable zeromem for JSON buffers.
function M.setup(opts)
  local config = M.config(opts)
  if has("0.11") then
    vim.lsp.config(M.name, config)
    vim.lsp.enable(M.name)
    return
  end
  local group = vim.api.nvim_create_augroup("zeromem_lsp", { clear = true })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = config.filetypes,
    callback = function(args)
      M.start(args.buf, opts)
    end,
  })
  -- buffers already open when setup() runs
  for _, bufnr in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(bufnr) and vim.tbl_contains(config.filetypes, vim.bo[bufnr].filetype) then
      M.start(bufnr, opts)
    end
  end
end

return M
