-- Headless end-to-end test of the zeromem server with Neovim's own LSP client.
--
--   ZEROMEM_PYTHON=/path/to/python ZEROMEM_TEST_FILE=/tmp/x/ds_config.json ZEROMEM_TEST_OUT=/tmp/x/result.json \
--     nvim --headless --noplugin -n -i NONE -u editors/neovim/test_init.lua
--
-- Loads editors/neovim (require("zeromem").setup), opens the file, waits for zeromem's diagnostics,
-- (without settings when ZEROMEM_TEST_NO_SETTINGS is set), requests hover at the "stage" value, opens it as `K` would, and writes to ZEROMEM_TEST_OUT:
-- the Neovim version, the server's window/showMessage texts, the diagnostics, the hover, inlay hints,
-- code actions, and a text rendering of the screen (windows, diagnostic virtual text, the hover float). Exit status 0 when it got both.
local here = vim.fn.fnamemodify(debug.getinfo(1, "S").source:sub(2), ":p:h")
vim.opt.runtimepath:prepend(here)
vim.o.columns = tonumber(os.getenv("ZEROMEM_TEST_COLUMNS") or "") or 120
vim.o.lines = tonumber(os.getenv("ZEROMEM_TEST_LINES") or "") or 44
vim.cmd("filetype on")
vim.o.number = true
vim.o.swapfile = false
vim.o.shadafile = "NONE"

local python = assert(os.getenv("ZEROMEM_PYTHON"), "ZEROMEM_PYTHON not set")
local file = assert(os.getenv("ZEROMEM_TEST_FILE"), "ZEROMEM_TEST_FILE not set")
local out = assert(os.getenv("ZEROMEM_TEST_OUT"), "ZEROMEM_TEST_OUT not set")
local timeout = (tonumber(os.getenv("ZEROMEM_TEST_TIMEOUT") or "") or 30) * 1000

local result = { errors = {} }
local get_clients = vim.lsp.get_clients or vim.lsp.get_active_clients -- 0.10+ / older
local encode = (vim.json and vim.json.encode) or vim.fn.json_encode

local function finish()
  local handle = assert(io.open(out, "w"))
  handle:write(encode(result))
  handle:close()
  for _, client in pairs(get_clients()) do
    if vim.fn.has("nvim-0.11") == 1 then
      client:stop()
    else
      client.stop()
    end
  end
  vim.wait(2000, function()
    return #get_clients() == 0
  end, 20)
  vim.cmd(#result.errors == 0 and "qall!" or "cquit!")
end

local function fail(message)
  table.insert(result.errors, message)
end

local function zeromem_client(bufnr)
  for _, client in pairs(get_clients()) do
    if client.name == "zeromem" and vim.lsp.buf_is_attached(bufnr, client.id) then
      return client
    end
  end
end

local function request(bufnr, method, params)
  local responses, err = vim.lsp.buf_request_sync(bufnr, method, params, timeout)
  if responses == nil then
    fail(method .. ": " .. tostring(err))
    return nil
  end
  for _, response in pairs(responses) do
    if response.error then
      fail(method .. ": " .. vim.inspect(response.error))
    end
    return response.result
  end
end

-- the screen: every window of the tab page (floats on top) drawn into a columns × lines grid,
-- with the diagnostics' virtual text, as a terminal would show it
local function render_screen()
  local width, height = vim.o.columns, vim.o.lines
  local grid = {}
  for row = 1, height do
    grid[row] = {}
    for col = 1, width do
      grid[row][col] = " "
    end
  end
  local function put(row, col, text, limit)
    for _, char in ipairs(vim.fn.split(text, "\\zs")) do
      if col > limit or col > width then
        return col
      end
      local cells = math.max(vim.fn.strdisplaywidth(char), 1)
      if row >= 1 and row <= height and col >= 1 then
        grid[row][col] = char
        for extra = 1, cells - 1 do -- a wide character covers the next cell(s)
          if col + extra <= width then
            grid[row][col + extra] = ""
          end
        end
      end
      col = col + cells
    end
    return col
  end
  local windows = vim.api.nvim_tabpage_list_wins(0)
  table.sort(windows, function(a, b)
    local fa = vim.api.nvim_win_get_config(a).relative ~= ""
    local fb = vim.api.nvim_win_get_config(b).relative ~= ""
    return (not fa and fb) or (fa == fb and a < b)
  end)
  -- extmark namespaces: the named ones, and vim.diagnostic's anonymous virtual-text ones
  local namespaces = vim.tbl_values(vim.api.nvim_get_namespaces())
  for _, meta in pairs(vim.diagnostic.get_namespaces()) do
    for _, value in pairs(meta.user_data or {}) do
      if type(value) == "number" then
        table.insert(namespaces, value)
      end
    end
  end
  for _, win in ipairs(windows) do
    local buf = vim.api.nvim_win_get_buf(win)
    local pos = vim.api.nvim_win_get_position(win)
    local floating = vim.api.nvim_win_get_config(win).relative ~= ""
    local top, left = pos[1] + 1, pos[2] + 1
    local w, h = vim.api.nvim_win_get_width(win), vim.api.nvim_win_get_height(win)
    local border = floating and vim.api.nvim_win_get_config(win).border or nil
    if floating then -- clear the float's cells, then draw its border (Neovim's own characters)
      local b = type(border) == "table" and #border > 0
      local function edge(i)
        local piece = b and border[(i - 1) % #border + 1] or ""
        return type(piece) == "table" and piece[1] or piece
      end
      local inner_top, inner_left = top + (b and 1 or 0), left + (b and 1 or 0)
      for row = top, inner_top + h - 1 + (b and 1 or 0) do
        put(row, left, string.rep(" ", w + (b and 2 or 0)), width)
      end
      if b then
        put(top, left, edge(1) .. string.rep(edge(2), w) .. edge(3), width)
        for row = inner_top, inner_top + h - 1 do
          put(row, left, edge(8), width)
          put(row, inner_left + w, edge(4), width)
        end
        put(inner_top + h, left, edge(7) .. string.rep(edge(6), w) .. edge(5), width)
      end
      top, left = inner_top, inner_left
    end
    local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    local numbered = vim.wo[win].number
    local gutter = numbered and math.max(#tostring(#lines), 3) + 1 or 0
    local row, index = top, 1
    while row <= top + h - 1 do
      local line = lines[index]
      if line == nil then
        if not floating then
          put(row, left, "~", left + w - 1)
        end
        row = row + 1
      else
        if numbered then
          put(row, left, string.format("%" .. (gutter - 1) .. "d ", index), left + w - 1)
        end
        local text_width = w - gutter
        local chars = vim.fn.split(line, "\\zs")
        local chunks, chunk, chunk_width = {}, "", 0
        for _, char in ipairs(chars) do
          local cw = math.max(vim.fn.strdisplaywidth(char), 1)
          if chunk_width + cw > text_width and vim.wo[win].wrap then
            table.insert(chunks, chunk)
            chunk, chunk_width = "", 0
          end
          chunk, chunk_width = chunk .. char, chunk_width + cw
        end
        table.insert(chunks, chunk)
        local last_col
        for i, piece in ipairs(chunks) do
          if row > top + h - 1 then
            break
          end
          last_col = put(row, left + gutter, piece, left + w - 1)
          if i < #chunks then
            row = row + 1
          end
        end
        -- virtual text (diagnostics) after the line's end
        local marks = {}
        for _, ns in ipairs(namespaces) do -- user_data may hold numbers that are not namespaces (0.12)
          local ok, found = pcall(vim.api.nvim_buf_get_extmarks, buf, ns, { index - 1, 0 }, { index - 1, -1 }, { details = true })
          if ok then
            vim.list_extend(marks, found)
          end
        end
        for _, mark in ipairs(marks) do
          local details = mark[4] or {}
          if details.virt_text then
            local text = ""
            for _, piece in ipairs(details.virt_text) do
              text = text .. piece[1]
            end
            last_col = put(row, (last_col or left + gutter) + 1, text, left + w - 1)
          end
        end
        row, index = row + 1, index + 1
      end
    end
  end
  local screen = {}
  for row = 1, height - 1 do -- the last row is the command line
    table.insert(screen, (table.concat(grid[row]):gsub("%s+$", "")))
  end
  while #screen > 0 and (screen[#screen] == "" or screen[#screen] == "~") do
    table.remove(screen)
  end
  return table.concat(screen, "\n")
end

local function main()
  local version = vim.version and vim.version() or {}
  result.nvim = string.format("%s.%s.%s", version.major or "?", version.minor or "?", version.patch or "?")
  result.api = vim.fn.has("nvim-0.11") == 1 and "vim.lsp.config/enable"
    or (vim.fn.has("nvim-0.8") == 1 and "vim.lsp.start" or "vim.lsp.start_client")

  vim.diagnostic.config({ virtual_text = { prefix = "■" }, signs = false, underline = false, update_in_insert = false })
  -- what the server shows the user (window/showMessage), recorded before Neovim shows it
  result.messages = {}
  local show_message = vim.lsp.handlers["window/showMessage"]
  vim.lsp.handlers["window/showMessage"] = function(err, message, ctx, config)
    table.insert(result.messages, message and message.message or vim.inspect(err))
    return show_message(err, message, ctx, config)
  end
  local opts = { cmd = { python, "-m", "zeromem_lsp", "serve" } }
  if os.getenv("ZEROMEM_TEST_NO_SETTINGS") == nil then
    -- the file's zeromem block gives the model; the budget comes from the editor settings
    opts.settings = { gpu_memory = os.getenv("ZEROMEM_TEST_GPU_MEMORY") or "24GiB" }
  end -- else the shipped default: settings = {}, which Lua sends as []
  require("zeromem").setup(opts)

  vim.cmd("edit " .. vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  result.filetype = vim.bo[bufnr].filetype

  local attached = vim.wait(timeout, function()
    return zeromem_client(bufnr) ~= nil
  end, 20)
  if not attached then
    return fail("no zeromem client attached to " .. file)
  end
  local client = zeromem_client(bufnr)
  result.server = client.server_capabilities and client.server_capabilities.hoverProvider ~= nil
  result.offset_encoding = client.offset_encoding
  -- offered pull diagnostics? (Neovim 0.12 pulls but cannot be asked to re-pull: it gets pushes instead)
  result.diagnostic_provider = client.server_capabilities.diagnosticProvider ~= nil

  local function zeromem_diagnostics()
    local found = {}
    for _, d in ipairs(vim.diagnostic.get(bufnr)) do
      if d.source == "zeromem" then
        local lsp = d.user_data and d.user_data.lsp or {}
        table.insert(found, {
          code = d.code or lsp.code, message = d.message, severity = d.severity,
          lnum = d.lnum, col = d.col, end_lnum = d.end_lnum, end_col = d.end_col,
        })
      end
    end
    return found
  end
  if not vim.wait(timeout, function()
    return #zeromem_diagnostics() > 0
  end, 20) then
    fail("no diagnostics from zeromem within " .. timeout .. " ms")
  end
  result.diagnostics = zeromem_diagnostics()

  -- hover where the user's cursor would be: on the "stage" value (or ZEROMEM_TEST_HOVER_PATTERN's end)
  local lines = vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)
  local pattern = os.getenv("ZEROMEM_TEST_HOVER_PATTERN") or '"stage"%s*:%s*'
  local stage_line, stage_col
  for i, line in ipairs(lines) do
    local s, e = line:find(pattern)
    if s then
      stage_line, stage_col = i - 1, e -- 0-based byte column of the value
    end
  end
  if stage_line == nil then
    return fail("no " .. pattern .. " in " .. file)
  end
  vim.api.nvim_win_set_cursor(0, { stage_line + 1, stage_col })
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  result.hover_position = params.position
  local hover = request(bufnr, "textDocument/hover", params)
  if hover == nil or hover.contents == nil then
    fail("no hover at the stage value")
  else
    result.hover = hover.contents.value or hover.contents
    -- show it the way `K` does, for the screen
    local float = { border = "rounded", max_width = 100, max_height = vim.o.lines - stage_line - 6, focusable = false }
    local handler = vim.lsp.handlers["textDocument/hover"]
    local shown = handler and pcall(handler, nil, hover, { bufnr = bufnr, client_id = client.id, method = "textDocument/hover" }, float)
    if not shown then -- Neovim 0.11+: vim.lsp.buf.hover() no longer goes through vim.lsp.handlers
      local markdown = vim.lsp.util.convert_input_to_markdown_lines(hover.contents)
      vim.lsp.util.open_floating_preview(markdown, "markdown", float)
    end
  end

  local range = { start = { line = 0, character = 0 }, ["end"] = { line = #lines, character = 0 } }
  result.inlay_hints = request(bufnr, "textDocument/inlayHint", { textDocument = params.textDocument, range = range })
  local actions = request(bufnr, "textDocument/codeAction", {
    textDocument = params.textDocument,
    range = { start = params.position, ["end"] = params.position },
    context = { diagnostics = {} }, -- the server offers the fixes of the findings in the range
  })
  result.code_actions = {}
  for _, action in ipairs(actions or {}) do
    table.insert(result.code_actions, action.title)
  end

  vim.diagnostic.show(nil, bufnr)
  vim.cmd("redraw")
  result.screen = render_screen()
end

local ok, err = xpcall(main, debug.traceback)
if not ok then
  fail(tostring(err))
end
finish()
