/**
 * The VS Code side: start `zeromem serve`, pass the settings, restart when the command changes.
 * Everything decidable without VS Code lives in ./config (unit-tested with node's test runner).
 *
 * Settings are read afresh for every start and every change; start, stop, restart and settings
 * changes run one at a time (Serial); a start that failed is retried on the next settings change, and
 * re-read a few times shortly after (a remote window may deliver User settings after activation).
 */

import * as fs from "fs";
import * as os from "os";
import * as vscode from "vscode";
import {
  CloseAction,
  ConfigurationParams,
  DidChangeConfigurationNotification,
  ErrorAction,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  TransportKind,
} from "vscode-languageclient/node";

import {
  ExtensionSettings,
  SERVER_SETTING_KEYS,
  ServerCommand,
  ServerSettings,
  documentSelector,
  findExecutable,
  onSettings,
  sameCommand,
  Serial,
  serverCommand,
  serverSettings,
  startFailureMessage,
} from "./config";

const SECTION = "zeromem";
const OPEN_SETTINGS = "Open Settings";
const SHOW_OUTPUT = "Show Output";

const SETTING_KEYS = ["path", "interpreter", ...SERVER_SETTING_KEYS];
/** After a failed start, re-read the settings this long after it (ms) and start if they changed. */
const REREAD_AFTER_FAILURE = [1000, 3000, 10000];

let client: LanguageClient | undefined;
let started: { command: ServerCommand; options: ServerSettings } | undefined;
let output: vscode.OutputChannel;
const serial = new Serial();
let rereads: NodeJS.Timeout[] = [];

function readSettings(): ExtensionSettings {
  // scoped to the first folder so folder-level values count; a fresh read every time, never cached
  const config = vscode.workspace.getConfiguration(SECTION, vscode.workspace.workspaceFolders?.[0]?.uri);
  const settings: ExtensionSettings = {};
  for (const key of SETTING_KEYS) {
    settings[key] = config.get(key);
  }
  return settings;
}

/** Where each set value came from, for the output channel (what a user needs when a setting seems ignored). */
function describeSources(): string {
  const config = vscode.workspace.getConfiguration(SECTION, vscode.workspace.workspaceFolders?.[0]?.uri);
  const parts: string[] = [];
  for (const key of SETTING_KEYS) {
    const seen = config.inspect(key);
    const layers = { user: seen?.globalValue, workspace: seen?.workspaceValue, folder: seen?.workspaceFolderValue };
    const set = Object.entries(layers).filter(([, value]) => value !== undefined && value !== "" && value !== null);
    if (set.length) parts.push(`${key} = ${set.map(([layer, value]) => `${JSON.stringify(value)} (${layer})`).join(", ")}`);
  }
  return parts.length ? parts.join("; ") : "none set";
}

function currentSettings(): { command: ServerCommand; options: ServerSettings } {
  const settings = readSettings();
  return { command: serverCommand(settings, environment()), options: serverSettings(settings) };
}

function environment() {
  return {
    home: os.homedir(),
    workspaceFolder: vscode.workspace.workspaceFolders?.[0]?.uri.fsPath,
    env: process.env,
    platform: process.platform,
  };
}

function isExecutableFile(candidate: string): boolean {
  try {
    const stat = fs.statSync(candidate);
    if (!stat.isFile()) return false;
    if (process.platform !== "win32") fs.accessSync(candidate, fs.constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Tell the user, without waiting for an answer (the lifecycle goes on meanwhile). */
function reportStartFailure(command: ServerCommand, reason: string): void {
  const message = startFailureMessage(command, reason);
  output.appendLine(message);
  void vscode.window.showErrorMessage(message, OPEN_SETTINGS, SHOW_OUTPUT).then((choice) => {
    if (choice === OPEN_SETTINGS) {
      const setting = command.source === "PATH" ? "zeromem.path" : command.source;
      void vscode.commands.executeCommand("workbench.action.openSettings", setting);
    } else if (choice === SHOW_OUTPUT) {
      output.show(true);
    }
  });
}

/** After a failed start: re-read the settings a few times, and start when the command changed. */
function rereadAfterFailure(failed: ServerCommand): void {
  cancelRereads();
  rereads = REREAD_AFTER_FAILURE.map((delay) => setTimeout(() => {
    void serial.run(async () => {
      const now = currentSettings();
      if (client || sameCommand(now.command, failed)) return;
      output.appendLine(`zeromem: settings now give \`${now.command.command}\`; starting again`);
      await startClient();
    });
  }, delay));
}

function cancelRereads(): void {
  rereads.forEach(clearTimeout);
  rereads = [];
}

async function startClient(): Promise<void> {
  const env = environment();
  const { command, options } = currentSettings();
  output.appendLine(`zeromem: settings: ${describeSources()}`);
  output.appendLine(`zeromem: starting ${command.command} ${command.args.join(" ")} (from ${command.source})`);

  // Fail early, with the fix, when the executable is plainly not there.
  if (findExecutable(command.command, env, isExecutableFile) === undefined) {
    const where = command.source === "PATH" ? "not found on PATH" : "no such executable file";
    reportStartFailure(command, where);
    rereadAfterFailure(command);
    return;
  }

  const serverOptions: ServerOptions = {
    command: command.command,
    args: command.args,
    transport: TransportKind.stdio,
    options: { env: process.env, cwd: env.workspaceFolder },
  };
  const clientOptions: LanguageClientOptions = {
    documentSelector: documentSelector(),
    initializationOptions: options,
    outputChannel: output,
    initializationFailedHandler: (error) => {
      reportStartFailure(command, `initialization failed: ${error instanceof Error ? error.message : String(error)}`);
      return false;
    },
    errorHandler: {
      error: () => ({ action: ErrorAction.Continue }),
      closed: () => ({ action: CloseAction.DoNotRestart, message: "zeromem: the language server stopped. Run 'zeromem: Restart language server' to start it again." }),
    },
    middleware: {
      workspace: {
        // Answer workspace/configuration for "zeromem" with the server's settings only: the
        // editor-side settings (path, interpreter, trace) are not the server's business.
        configuration: async (params: ConfigurationParams, token, next) => {
          const answers = await next(params, token);
          if (!Array.isArray(answers)) return answers;
          return params.items.map((item, index) =>
            item.section === SECTION ? serverSettings(readSettings()) : answers[index]);
        },
      },
    },
  };

  const candidate = new LanguageClient(SECTION, "zeromem", serverOptions, clientOptions);
  try {
    await candidate.start();
  } catch (error) {
    reportStartFailure(command, error instanceof Error ? error.message : String(error));
    try {
      await candidate.dispose();
    } catch {
      // already stopped
    }
    rereadAfterFailure(command);
    return;
  }
  cancelRereads();
  client = candidate;
  started = { command, options };
}

async function stopClient(): Promise<void> {
  const running = client;
  client = undefined;
  started = undefined;
  if (running) {
    try {
      await running.stop();
    } catch {
      // a server that never started cannot be stopped
    }
  }
}

async function restartClient(): Promise<void> {
  await stopClient();
  await startClient();
}

async function onSettingsChanged(): Promise<void> {
  const now = currentSettings();
  // a server that stopped on its own counts as not running: the change starts it again
  const running = client && started && client.isRunning() ? started : undefined;
  switch (onSettings(running, now)) {
    case "start":
    case "restart":
      await restartClient();
      return;
    case "notify":
      // The server recomputes its settings from initializationOptions + this section, so `started`
      // (what it was started with) stays as it is.
      await client!.sendNotification(DidChangeConfigurationNotification.type, { settings: { [SECTION]: now.options } });
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("zeromem");
  context.subscriptions.push(
    output,
    vscode.commands.registerCommand("zeromem.restartServer", () => serial.run(restartClient)),
    vscode.commands.registerCommand("zeromem.showOutput", () => output.show(true)),
    vscode.commands.registerCommand("zeromem.showMemoryReport", showMemoryReport),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration(SECTION) && !onlyTraceChanged(event)) {
        void serial.run(onSettingsChanged);
      }
    }),
    { dispose: cancelRereads },
  );
  await serial.run(startClient);
}

/** The server's picture of the step for the active file (the page `zeromem estimate --config FILE --html` writes), in
 * a webview beside the editor. The page is self-contained: no script, nothing loaded. */
async function showMemoryReport(): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  if (!editor || !client || !client.isRunning()) {
    void vscode.window.showInformationMessage("zeromem: open a training config first (and let the server start).");
    return;
  }
  const uri = client.code2ProtocolConverter.asUri(editor.document.uri);
  const answer = (await client.sendRequest("workspace/executeCommand", {
    command: "zeromem.memoryReportHtml",
    arguments: [uri],
  })) as { html?: string; why?: string } | null;
  if (!answer || !answer.html) {
    void vscode.window.showInformationMessage(`zeromem: ${answer?.why ?? "no memory report for this file"}`);
    return;
  }
  const name = editor.document.uri.path.split("/").pop() ?? "config";
  const panel = vscode.window.createWebviewPanel("zeromem.memoryReport", `Memory: ${name}`, vscode.ViewColumn.Beside, {
    enableScripts: false,
  });
  panel.webview.html = answer.html;
}

function onlyTraceChanged(event: vscode.ConfigurationChangeEvent): boolean {
  // vscode-languageclient follows zeromem.trace.server itself.
  return event.affectsConfiguration(`${SECTION}.trace`) && !SETTING_KEYS.some((key) => event.affectsConfiguration(`${SECTION}.${key}`));
}

export async function deactivate(): Promise<void> {
  cancelRereads();
  await serial.run(stopClient);
}
