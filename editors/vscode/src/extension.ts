/**
 * The VS Code side: start `zeromem serve`, pass the settings, restart when the command changes.
 * Everything decidable without VS Code lives in ./config (unit-tested with node's test runner).
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
  ServerCommand,
  ServerSettings,
  documentSelector,
  findExecutable,
  needsRestart,
  serverCommand,
  serverSettings,
  startFailureMessage,
} from "./config";

const SECTION = "zeromem";
const OPEN_SETTINGS = "Open Settings";
const SHOW_OUTPUT = "Show Output";

let client: LanguageClient | undefined;
let started: { command: ServerCommand; options: ServerSettings } | undefined;
let output: vscode.OutputChannel;

function readSettings(): ExtensionSettings {
  const config = vscode.workspace.getConfiguration(SECTION);
  const settings: ExtensionSettings = {};
  for (const key of ["path", "interpreter", "gpuMemory", "parameters", "worldSize", "precision", "optimizer", "warnFraction"]) {
    settings[key] = config.get(key);
  }
  return settings;
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

async function reportStartFailure(command: ServerCommand, reason: string): Promise<void> {
  const message = startFailureMessage(command, reason);
  output.appendLine(message);
  const choice = await vscode.window.showErrorMessage(message, OPEN_SETTINGS, SHOW_OUTPUT);
  if (choice === OPEN_SETTINGS) {
    const setting = command.source === "PATH" ? "zeromem.path" : command.source;
    await vscode.commands.executeCommand("workbench.action.openSettings", setting);
  } else if (choice === SHOW_OUTPUT) {
    output.show(true);
  }
}

async function startClient(): Promise<void> {
  const settings = readSettings();
  const env = environment();
  const command = serverCommand(settings, env);
  const options = serverSettings(settings);

  // Fail early, with the fix, when the executable is plainly not there.
  if (findExecutable(command.command, env, isExecutableFile) === undefined) {
    const where = command.source === "PATH" ? "not found on PATH" : "no such executable file";
    await reportStartFailure(command, where);
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
      void reportStartFailure(command, `initialization failed: ${error instanceof Error ? error.message : String(error)}`);
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
    await reportStartFailure(command, error instanceof Error ? error.message : String(error));
    try {
      await candidate.dispose();
    } catch {
      // already stopped
    }
    return;
  }
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
  const settings = readSettings();
  const now = { command: serverCommand(settings, environment()), options: serverSettings(settings) };
  if (!client || !started || needsRestart(started, now)) {
    await restartClient();
    return;
  }
  // The server recomputes its settings from initializationOptions + this section, so `started`
  // (what it was started with) stays as it is.
  await client.sendNotification(DidChangeConfigurationNotification.type, { settings: { [SECTION]: now.options } });
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  output = vscode.window.createOutputChannel("zeromem");
  context.subscriptions.push(
    output,
    vscode.commands.registerCommand("zeromem.restartServer", restartClient),
    vscode.commands.registerCommand("zeromem.showOutput", () => output.show(true)),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration(SECTION) && !onlyTraceChanged(event)) {
        void onSettingsChanged();
      }
    }),
  );
  await startClient();
}

function onlyTraceChanged(event: vscode.ConfigurationChangeEvent): boolean {
  // vscode-languageclient follows zeromem.trace.server itself.
  const others = ["path", "interpreter", "gpuMemory", "parameters", "worldSize", "precision", "optimizer", "warnFraction"];
  return event.affectsConfiguration(`${SECTION}.trace`) && !others.some((key) => event.affectsConfiguration(`${SECTION}.${key}`));
}

export async function deactivate(): Promise<void> {
  await stopClient();
}
