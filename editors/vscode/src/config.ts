/**
 * The pure part of the extension: settings → server command, server options, restart decisions and
 * messages. No `vscode` import here, so `node --test` runs it without VS Code.
 */

import * as path from "path";

/** The extension's settings as read from the `zeromem` configuration section. */
export interface ExtensionSettings {
  path?: string | null;
  interpreter?: string | null;
  gpuMemory?: string | number | null;
  parameters?: string | number | null;
  worldSize?: string | number | null;
  precision?: string | null;
  optimizer?: string | null;
  warnFraction?: string | number | null;
  sequenceLength?: string | number | null;
  microBatch?: string | number | null;
  gradientAccumulationSteps?: string | number | null;
  gradientCheckpointing?: string | boolean | null;
  attention?: string | null;
  reserved?: string | null;
  engine?: string | null;
  fsdpVersion?: string | number | null;
  paramDtype?: string | null;
  optimizerImpl?: string | null;
  lossKernel?: string | null;
  loraRank?: string | number | null;
  loraTargets?: string | string[] | { regex: string } | null;
  modulesToSave?: string | null;
  excludeModules?: string | string[] | { regex: string } | null;
  layersToTransform?: number[] | null;
  layersPattern?: string[] | null;
  loraRankPattern?: Record<string, number> | null;
  loraTargetLinear?: string | boolean | null;
  targetParameters?: string[] | null;
  dora?: string | boolean | null;
  quantization?: string | null;
  doubleQuant?: string | boolean | null;
  kbitPrepare?: string | boolean | null;
  loraDropout?: string | number | null;
  trainer?: string | null;
  precomputeRefLogProbs?: string | boolean | null;
  transformersVersion?: string | null;
  tensorParallel?: string | number | null;
  contextParallel?: string | number | null;
  ulysses?: string | number | null;
  expertParallel?: string | number | null;
  activationOffload?: string | null;
  tiledMlp?: string | number | boolean | null;
  [other: string]: unknown;
}

/** The settings the server understands (initializationOptions and workspace/configuration "zeromem"). */
export const SERVER_SETTING_KEYS = [
  "gpuMemory",
  "parameters",
  "worldSize",
  "precision",
  "optimizer",
  "warnFraction",
  "sequenceLength",
  "microBatch",
  "gradientAccumulationSteps",
  "gradientCheckpointing",
  "attention",
  "reserved",
  "engine",
  "fsdpVersion",
  "paramDtype",
  "optimizerImpl",
  "lossKernel",
  "loraRank",
  "loraTargets",
  "modulesToSave",
  "excludeModules",
  "layersToTransform",
  "layersPattern",
  "loraRankPattern",
  "loraTargetLinear",
  "targetParameters",
  "dora",
  "quantization",
  "doubleQuant",
  "kbitPrepare",
  "loraDropout",
  "accelerateConfig",
  "trainer",
  "precomputeRefLogProbs",
  "transformersVersion",
  "tensorParallel",
  "contextParallel",
  "ulysses",
  "expertParallel",
  "activationOffload",
  "tiledMlp",
] as const;

export type ServerSettingKey = (typeof SERVER_SETTING_KEYS)[number];
/** What the server gets: JSON values (lists and objects for the adapter-matching settings). */
export type SettingValue = string | number | boolean | readonly (string | number)[] | { readonly [key: string]: unknown };
export type ServerSettings = Partial<Record<ServerSettingKey, SettingValue>>;

export interface ServerCommand {
  command: string;
  args: string[];
  /** Which setting chose it: shown in messages so the user knows what to fix. */
  source: "zeromem.path" | "zeromem.interpreter" | "PATH";
}

export interface Environment {
  /** The user's home directory, for `~`. */
  home?: string;
  /** The first workspace folder, for `${workspaceFolder}`. */
  workspaceFolder?: string;
  /** Environment variables, for `${env:NAME}`. */
  env?: Record<string, string | undefined>;
  platform?: NodeJS.Platform;
}

/** Expand `~`, `${workspaceFolder}`, `${userHome}` and `${env:NAME}` in a path setting. */
export function expandPath(value: string, environment: Environment = {}): string {
  let result = value.trim();
  const home = environment.home ?? "";
  if (home && (result === "~" || result.startsWith("~/") || result.startsWith("~\\"))) {
    result = home + result.slice(1);
  }
  result = result.replace(/\$\{(workspaceFolder|userHome|env:([A-Za-z_][A-Za-z0-9_]*))\}/g, (whole, name, variable) => {
    if (name === "workspaceFolder") return environment.workspaceFolder ?? whole;
    if (name === "userHome") return home || whole;
    return environment.env?.[variable] ?? "";
  });
  return result;
}

/**
 * A path setting, expanded; a relative path with a directory part (`.venv/bin/python`) is taken from
 * the workspace folder, where the server is started — checking it elsewhere would pass and then fail.
 */
function settingPath(value: string, environment: Environment): string {
  const expanded = expandPath(value, environment);
  const pathApi = (environment.platform ?? process.platform) === "win32" ? path.win32 : path.posix;
  const hasDirectory = expanded.includes("/") || expanded.includes("\\");
  if (hasDirectory && !pathApi.isAbsolute(expanded) && environment.workspaceFolder) {
    return pathApi.resolve(environment.workspaceFolder, expanded);
  }
  return expanded;
}

function nonEmpty(value: unknown): value is string {
  return typeof value === "string" && value.trim() !== "";
}

/**
 * How to start the server: `zeromem.path` (`<path> serve`), else `zeromem.interpreter`
 * (`<python> -m zeromem_lsp serve`), else `zeromem serve` from PATH.
 */
export function serverCommand(settings: ExtensionSettings, environment: Environment = {}): ServerCommand {
  if (nonEmpty(settings.path)) {
    return { command: settingPath(settings.path, environment), args: ["serve"], source: "zeromem.path" };
  }
  if (nonEmpty(settings.interpreter)) {
    return {
      command: settingPath(settings.interpreter, environment),
      args: ["-m", "zeromem_lsp", "serve"],
      source: "zeromem.interpreter",
    };
  }
  return { command: "zeromem", args: ["serve"], source: "PATH" };
}

/**
 * The server's settings from the extension's: only the keys the server knows (it warns about any
 * other), and nothing for unset values (null, "", whitespace, [] and {}: the list and object settings'
 * defaults), so the server's defaults apply. Lists and objects go as written; the server checks them.
 */
export function serverSettings(settings: ExtensionSettings): ServerSettings {
  const result: ServerSettings = {};
  for (const key of SERVER_SETTING_KEYS) {
    const value = settings[key];
    if (value === null || value === undefined) continue;
    if (typeof value === "string") {
      const text = value.trim();
      if (text === "" || (CHOICE_SETTINGS.has(key) && text === UNSET_CHOICE)) continue;
      if (NUMBER_SETTINGS.has(key) && NUMBER.test(text)) result[key] = Number(text);
      else if (BOOLEAN_SETTINGS.has(key) && (text === "true" || text === "false")) result[key] = text === "true";
      else result[key] = text;
    } else if ((typeof value === "number" && Number.isFinite(value)) || typeof value === "boolean") {
      result[key] = value; // settings.json written before these became strings
    } else if (STRUCTURED_SETTINGS.has(key) && typeof value === "object" && Object.keys(value).length > 0) {
      result[key] = value as SettingValue;
    }
  }
  return result;
}

/** The dropdowns' "unset" choice: the Settings UI cannot offer null. */
export const UNSET_CHOICE = "default";
const CHOICE_SETTINGS: ReadonlySet<string> = new Set([
  "precision", "optimizer", "gradientCheckpointing", "attention", "engine", "fsdpVersion", "paramDtype", "optimizerImpl", "dora",
  "quantization", "doubleQuant", "kbitPrepare", "lossKernel", "trainer", "precomputeRefLogProbs", "loraTargetLinear",
  "activationOffload",
]);
/** Numbers typed into the Settings UI's text boxes (it has no box for an optional number). */
const NUMBER_SETTINGS: ReadonlySet<string> = new Set([
  "worldSize", "warnFraction", "sequenceLength", "microBatch", "gradientAccumulationSteps", "loraRank",
  "fsdpVersion", "loraDropout", "tensorParallel", "contextParallel", "ulysses", "expertParallel", "tiledMlp",
]);
/** Dropdowns for an optional boolean: "true" / "false" (or "default"); tiledMlp's text box takes them too. */
const BOOLEAN_SETTINGS: ReadonlySet<string> = new Set([
  "gradientCheckpointing", "dora", "doubleQuant", "kbitPrepare", "precomputeRefLogProbs", "loraTargetLinear",
  "tiledMlp",
]);
/** Settings whose value may be a list or an object (package.json: "array" / "object" types). */
const STRUCTURED_SETTINGS: ReadonlySet<string> = new Set([
  "loraTargets", "excludeModules", "layersToTransform", "layersPattern", "loraRankPattern", "targetParameters",
]);
const NUMBER = /^[0-9]*\.?[0-9]+$/;

/**
 * Whether a settings change needs a new server rather than a didChangeConfiguration: when the
 * command changed, or when a value given at start (initializationOptions) was removed — the server
 * layers later settings over its initializationOptions, so a removed value would otherwise stay.
 */
export function needsRestart(
  started: { command: ServerCommand; options: ServerSettings },
  now: { command: ServerCommand; options: ServerSettings },
): boolean {
  if (!sameCommand(started.command, now.command)) return true;
  return Object.keys(started.options).some((key) => !(key in now.options));
}

export function sameCommand(a: ServerCommand, b: ServerCommand): boolean {
  return a.command === b.command && a.args.join("\0") === b.args.join("\0");
}

/** Where `name` is found on `PATH` (with PATHEXT on Windows), or undefined. */
export function findExecutable(
  name: string,
  environment: Environment,
  exists: (candidate: string) => boolean,
): string | undefined {
  const platform = environment.platform ?? process.platform;
  const pathApi = platform === "win32" ? path.win32 : path.posix;
  const extensions = platform === "win32"
    ? ["", ...(environment.env?.PATHEXT ?? ".COM;.EXE;.BAT;.CMD").split(";").filter(Boolean)]
    : [""];
  if (name.includes("/") || (platform === "win32" && name.includes("\\"))) {
    return extensions.map((ext) => name + ext).find(exists);
  }
  const env = environment.env ?? {};
  const searchPath = env.PATH ?? env.Path ?? "";
  for (const directory of searchPath.split(platform === "win32" ? ";" : ":")) {
    if (!directory) continue;
    for (const ext of extensions) {
      const candidate = pathApi.join(directory, name + ext);
      if (exists(candidate)) return candidate;
    }
  }
  return undefined;
}

/** The command as a shell-like string for messages. */
export function describeCommand(command: ServerCommand): string {
  const quote = (part: string) => (/[\s"']/.test(part) ? JSON.stringify(part) : part);
  return [command.command, ...command.args].map(quote).join(" ");
}

/** What to tell the user when the server cannot be started, with the fix. */
export function startFailureMessage(command: ServerCommand, reason: string): string {
  const what = `zeromem: cannot start the language server (\`${describeCommand(command)}\`): ${reason}.`;
  switch (command.source) {
    case "zeromem.path":
      return `${what} Check the setting zeromem.path: it must name the \`zeromem\` executable ` +
        "(e.g. .venv/bin/zeromem), or clear it to use zeromem.interpreter or `zeromem` on PATH.";
    case "zeromem.interpreter":
      return `${what} Install the server into that Python (\`${quotePath(command.command)} -m pip install /path/to/zeromem-lsp\`: ` +
        "a clone of the repository; it is not on PyPI), or fix the setting zeromem.interpreter.";
    default:
      return `${what} Install it from a clone of the repository (\`pip install /path/to/zeromem-lsp\` or ` +
        "`pipx install /path/to/zeromem-lsp`; it is not on PyPI) so that " +
        "`zeromem` is on PATH, or set zeromem.path to the executable, or zeromem.interpreter to a Python that has it.";
  }
}

function quotePath(value: string): string {
  return /\s/.test(value) ? JSON.stringify(value) : value;
}

/** A document filter, as in vscode-languageclient's document selector. */
export interface DocumentFilter {
  language: string;
  scheme?: string;
  pattern?: string;
}

/**
 * Which documents go to the server: every JSON and JSONC file (the server recognises a DeepSpeed
 * config by its keys and says nothing about other JSON), files of the extension's own DeepSpeed JSON
 * language (DeepSpeed config names, which VS Code's JSON service then leaves alone), and every YAML
 * file on disk: Accelerate configs and axolotl / LLaMA-Factory / TRL recipes are recognised by their
 * keys (their names vary), and the server says nothing about other YAML.
 */

export const DEEPSPEED_LANGUAGE = "deepspeed-json";

export function documentSelector(): DocumentFilter[] {
  const filters: DocumentFilter[] = [];
  for (const scheme of ["file", "untitled"]) {
    filters.push({ scheme, language: "json" }, { scheme, language: "jsonc" }, { scheme, language: DEEPSPEED_LANGUAGE });
  }
  filters.push({ scheme: "file", language: "yaml" });
  return filters;
}

/**
 * What a settings change (or a late re-read) does: start when no server runs (a failed start is
 * retried on every change), restart when the command changed or a start-time value was cleared,
 * else tell the running server.
 */
export function onSettings(
  running: { command: ServerCommand; options: ServerSettings } | undefined,
  now: { command: ServerCommand; options: ServerSettings },
): "start" | "restart" | "notify" {
  if (running === undefined) return "start";
  return needsRestart(running, now) ? "restart" : "notify";
}

/**
 * Runs async tasks one at a time, in the order given: start, stop, restart and settings changes never
 * interleave (two quick restarts, or a restart during a settings change, would otherwise leave two
 * clients or none). A failing task does not stop the ones after it.
 */
export class Serial {
  private tail: Promise<void> = Promise.resolve();

  run<T>(task: () => Promise<T>): Promise<T> {
    const result = this.tail.then(task);
    this.tail = result.then(() => undefined, () => undefined);
    return result;
  }
}
