// Unit tests of the pure part (settings → server command and options), run by `npm test`
// (node's test runner on the compiled JS; no VS Code needed).

import { strict as assert } from "assert";
import { spawnSync } from "child_process";
import * as fs from "fs";
import * as os from "os";
import * as path from "path";
import { describe, it } from "node:test";

import {
  describeCommand,
  documentSelector,
  expandPath,
  findExecutable,
  needsRestart,
  onSettings,
  SERVER_SETTING_KEYS,
  Serial,
  serverCommand,
  serverSettings,
  startFailureMessage,
} from "../config";

const EXTENSION_ROOT = path.resolve(__dirname, "..", "..");

describe("serverCommand", () => {
  it("uses zeromem.path first, with `serve`", () => {
    const command = serverCommand({ path: "/opt/zm/bin/zeromem", interpreter: "/usr/bin/python3" });
    assert.deepEqual(command, { command: "/opt/zm/bin/zeromem", args: ["serve"], source: "zeromem.path" });
  });

  it("falls back to zeromem.interpreter -m zeromem_lsp serve", () => {
    const command = serverCommand({ path: "  ", interpreter: "/venv/bin/python" });
    assert.deepEqual(command, {
      command: "/venv/bin/python", args: ["-m", "zeromem_lsp", "serve"], source: "zeromem.interpreter",
    });
  });

  it("else runs zeromem from PATH", () => {
    for (const settings of [{}, { path: "", interpreter: null }, { path: null }]) {
      assert.deepEqual(serverCommand(settings), { command: "zeromem", args: ["serve"], source: "PATH" });
    }
  });

  it("expands ~ and ${workspaceFolder} in the paths", () => {
    const env = { home: "/home/ada", workspaceFolder: "/src/proj", env: { VENV: "/v" } };
    assert.equal(serverCommand({ path: "~/bin/zeromem" }, env).command, "/home/ada/bin/zeromem");
    assert.equal(serverCommand({ interpreter: "${workspaceFolder}/.venv/bin/python" }, env).command,
      "/src/proj/.venv/bin/python");
    assert.equal(expandPath("${env:VENV}/bin/python", env), "/v/bin/python");
    assert.equal(expandPath("${userHome}/x", env), "/home/ada/x");
    assert.equal(expandPath("~user/x", env), "~user/x"); // only ~ and ~/ are expanded
    assert.equal(expandPath("${workspaceFolder}/x", {}), "${workspaceFolder}/x"); // no folder: left as is
  });

  it("takes a relative path from the workspace folder, where the server starts", () => {
    const env = { workspaceFolder: "/src/proj", platform: "linux" as const };
    assert.equal(serverCommand({ interpreter: ".venv/bin/python" }, env).command, "/src/proj/.venv/bin/python");
    assert.equal(serverCommand({ path: "./tools/zeromem" }, env).command, "/src/proj/tools/zeromem");
    assert.equal(serverCommand({ interpreter: "python3" }, env).command, "python3"); // a bare name: PATH
    assert.equal(serverCommand({ interpreter: ".venv/bin/python" }, {}).command, ".venv/bin/python"); // no folder
  });

  it("describes the command for messages", () => {
    assert.equal(describeCommand(serverCommand({ interpreter: "/My Venv/python" })),
      '"/My Venv/python" -m zeromem_lsp serve');
  });
});

describe("serverSettings", () => {
  it("passes the server's eleven settings, camelCase, and nothing else", () => {
    const server = {
      gpuMemory: "24GiB", parameters: "7B", worldSize: 8, precision: "bf16", optimizer: "adamw", warnFraction: 0.85,
      sequenceLength: 4096, microBatch: 2, gradientCheckpointing: true, attention: "eager", reserved: "2GiB",
    };
    const options = serverSettings({ path: "/x/zeromem", interpreter: "/x/python", trace: { server: "verbose" }, ...server });
    assert.deepEqual(options, server);
  });

  it("leaves out unset values so the server's defaults apply", () => {
    assert.deepEqual(serverSettings({ gpuMemory: "", parameters: null, worldSize: undefined, precision: "  ", warnFraction: NaN }), {});
    assert.deepEqual(serverSettings({ gpuMemory: " 80GiB ", parameters: 8030261248 }), { gpuMemory: "80GiB", parameters: 8030261248 });
  });

  it("reads the Settings UI's text boxes and dropdowns: numbers as numbers, \"default\" as unset", () => {
    assert.deepEqual(serverSettings({ worldSize: " 8 ", warnFraction: "0.85", precision: "default", optimizer: "default" }),
      { worldSize: 8, warnFraction: 0.85 });
    assert.deepEqual(serverSettings({ worldSize: "", warnFraction: "", precision: "bf16", optimizer: "lion" }),
      { precision: "bf16", optimizer: "lion" });
    assert.deepEqual(serverSettings({ sequenceLength: "4096", microBatch: " 2 ", gradientCheckpointing: "false", attention: "default" }),
      { sequenceLength: 4096, microBatch: 2, gradientCheckpointing: false });
    assert.deepEqual(serverSettings({ gradientCheckpointing: "default", reserved: "" }), {});
    assert.deepEqual(serverSettings({ fsdpVersion: "2" }), { fsdpVersion: 2 }); // the dropdown's "2", sent as 2
    assert.deepEqual(serverSettings({ fsdpVersion: "default" }), {});
    // the N-D degrees as numbers; tiledMlp's box takes true / false or a shard count (issue 30)
    assert.deepEqual(serverSettings({ tensorParallel: "2", ulysses: " 8 ", activationOffload: "default", tiledMlp: "true" }),
      { tensorParallel: 2, ulysses: 8, tiledMlp: true });
    assert.deepEqual(serverSettings({ tiledMlp: "4", activationOffload: "cpu_all" }), { tiledMlp: 4, activationOffload: "cpu_all" });
    // not a number: passed on as typed, so the server names the problem
    assert.deepEqual(serverSettings({ worldSize: "eight" }), { worldSize: "eight" });
  });

  it("passes the adapter-matching lists and objects as written, and their empty defaults as unset", () => {
    const written = {
      excludeModules: { regex: ".*mlp.*" }, layersToTransform: [0, 2], layersPattern: ["layers"],
      loraRankPattern: { v_proj: 16 }, targetParameters: ["mlp.experts.down_proj"], loraTargets: ["q_proj", "v_proj"],
    };
    assert.deepEqual(serverSettings({ ...written, loraTargetLinear: "true" }), { ...written, loraTargetLinear: true });
    assert.deepEqual(serverSettings({ loraTargets: { regex: ".*q_proj" }, excludeModules: ["o_proj"] }),
      { loraTargets: { regex: ".*q_proj" }, excludeModules: ["o_proj"] });
    assert.deepEqual(serverSettings({
      excludeModules: [], layersToTransform: [], layersPattern: [], loraRankPattern: {}, targetParameters: [],
      loraTargets: "", loraTargetLinear: "default",
    }), {});
    assert.deepEqual(serverSettings({ loraTargetLinear: "false" }), { loraTargetLinear: false });
    // a list or object for a setting that takes neither is not sent (as before: only strings, numbers, booleans)
    assert.deepEqual(serverSettings({ gpuMemory: ["80GiB"] as unknown as string, modulesToSave: { a: 1 } as unknown as string }), {});
  });
});

describe("needsRestart", () => {
  const command = serverCommand({});
  it("is false when only server settings change or are added", () => {
    assert.equal(needsRestart({ command, options: { gpuMemory: "24GiB" } },
      { command, options: { gpuMemory: "80GiB", worldSize: 4 } }), false);
  });
  it("is true when the command changes", () => {
    assert.equal(needsRestart({ command, options: {} }, { command: serverCommand({ path: "/z" }), options: {} }), true);
    assert.equal(needsRestart({ command: serverCommand({ interpreter: "/a/python" }), options: {} },
      { command: serverCommand({ interpreter: "/b/python" }), options: {} }), true);
  });
  it("is true when a setting given at start is cleared (initializationOptions would keep it)", () => {
    assert.equal(needsRestart({ command, options: { gpuMemory: "24GiB", worldSize: 8 } },
      { command, options: { worldSize: 8 } }), true);
  });
});

describe("onSettings", () => {
  const command = serverCommand({});
  it("starts when nothing runs (a failed start is retried on the next change)", () => {
    assert.equal(onSettings(undefined, { command, options: {} }), "start");
  });
  it("restarts on a new command, else notifies", () => {
    const running = { command, options: { gpuMemory: "24GiB" } };
    assert.equal(onSettings(running, { command: serverCommand({ path: "/z" }), options: {} }), "restart");
    assert.equal(onSettings(running, { command, options: { gpuMemory: "80GiB" } }), "notify");
  });
});

describe("Serial", () => {
  it("runs tasks one at a time in order, and goes on after a failure", async () => {
    const serial = new Serial();
    const log: string[] = [];
    const task = (name: string, ms: number, fail = false) => () => new Promise<string>((resolve, reject) => {
      log.push(`${name}+`);
      setTimeout(() => { log.push(`${name}-`); fail ? reject(new Error(name)) : resolve(name); }, ms);
    });
    const a = serial.run(task("a", 30));
    const b = serial.run(task("b", 1, true));
    const c = serial.run(task("c", 1));
    assert.equal(await a, "a");
    await assert.rejects(b, /b/);
    assert.equal(await c, "c");
    assert.deepEqual(log, ["a+", "a-", "b+", "b-", "c+", "c-"]);
  });
});

describe("findExecutable", () => {
  const files = new Set(["/usr/local/bin/zeromem", "/venv/bin/python", "C:\\Py\\Scripts\\zeromem.EXE"]);
  const exists = (candidate: string) => files.has(candidate);
  it("searches PATH in order", () => {
    const env = { env: { PATH: "/usr/bin::/usr/local/bin" }, platform: "linux" as const };
    assert.equal(findExecutable("zeromem", env, exists), "/usr/local/bin/zeromem");
    assert.equal(findExecutable("nothere", env, exists), undefined);
  });
  it("checks a path as given", () => {
    const env = { env: { PATH: "" }, platform: "linux" as const };
    assert.equal(findExecutable("/venv/bin/python", env, exists), "/venv/bin/python");
    assert.equal(findExecutable("/venv/bin/zeromem", env, exists), undefined);
  });
  it("uses PATHEXT on Windows", () => {
    const env = { env: { Path: "C:\\Windows;C:\\Py\\Scripts", PATHEXT: ".COM;.EXE" }, platform: "win32" as const };
    assert.equal(findExecutable("zeromem", env, exists), "C:\\Py\\Scripts\\zeromem.EXE");
  });
});

describe("startFailureMessage", () => {
  it("says how to fix a missing zeromem on PATH", () => {
    const message = startFailureMessage(serverCommand({}), "not found on PATH");
    assert.match(message, /`zeromem serve`/);
    assert.match(message, /pip install \/path\/to\/zeromem-lsp/);
    assert.match(message, /not on PyPI/);
    assert.match(message, /zeromem\.path/);
    assert.match(message, /zeromem\.interpreter/);
  });
  it("points at the setting that chose the command", () => {
    assert.match(startFailureMessage(serverCommand({ path: "/bad" }), "no such executable file"), /Check the setting zeromem\.path/);
    const message = startFailureMessage(serverCommand({ interpreter: "/venv/bin/python" }), "exit code 1");
    assert.match(message, /\/venv\/bin\/python -m pip install \/path\/to\/zeromem-lsp/);
  });
});

describe("documentSelector", () => {
  it("covers JSON, JSONC and every YAML file (recipes are recognised by content, not by name)", () => {
    const selector = documentSelector();
    const languages = new Set(selector.map((filter) => filter.language));
    assert.deepEqual([...languages].sort(), ["deepspeed-json", "json", "jsonc", "yaml"]);
    const yaml = selector.find((filter) => filter.language === "yaml");
    assert.deepEqual(yaml, { scheme: "file", language: "yaml" });
  });
});

describe("package.json", () => {
  const manifest = JSON.parse(fs.readFileSync(path.join(EXTENSION_ROOT, "package.json"), "utf8"));
  const properties = manifest.contributes.configuration.properties;

  it("declares every setting the extension reads and mirrors the server's", () => {
    for (const key of ["path", "interpreter", ...SERVER_SETTING_KEYS, "trace.server"]) {
      assert.ok(properties[`zeromem.${key}`], `zeromem.${key} missing from contributes.configuration`);
    }
  });

  it("gives DeepSpeed config names their own language, so VS Code's JSON service does not report them too", () => {
    assert.equal(manifest.contributes.jsonValidation, undefined); // the server's hover has the key docs
    const [language] = manifest.contributes.languages;
    assert.equal(language.id, "deepspeed-json");
    assert.ok(manifest.activationEvents.includes("onLanguage:deepspeed-json"));
    assert.ok(documentSelector().some((filter) => filter.language === "deepspeed-json"));
    const [grammar] = manifest.contributes.grammars;
    assert.equal(grammar.language, "deepspeed-json");
    for (const file of [language.configuration, grammar.path]) {
      JSON.parse(fs.readFileSync(path.join(EXTENSION_ROOT, file), "utf8"));
    }
  });

  // the lists and objects the Settings UI edits as such (a list of strings or integers; Item/Value pairs)
  const LISTS = ["layersToTransform", "layersPattern", "targetParameters"];
  const OBJECTS = ["loraRankPattern"];
  // PEFT also takes one regular expression ({"regex": ...}) here: several types, edited in settings.json
  const UNIONS = ["loraTargets", "excludeModules"];

  it("edits the adapter-matching lists and rank pattern in the Settings UI, their empty value unset", () => {
    for (const key of LISTS) {
      const property = properties[`zeromem.${key}`];
      assert.equal(property.type, "array", key);
      assert.ok(["string", "integer"].includes(property.items.type), key); // VS Code's list editor
      assert.deepEqual(property.default, [], key);
    }
    for (const key of OBJECTS) {
      const property = properties[`zeromem.${key}`];
      assert.equal(property.type, "object", key);
      assert.equal(property.additionalProperties.type, "integer", key); // VS Code's Item/Value editor
      assert.deepEqual(property.default, {}, key);
    }
    for (const key of UNIONS) {
      const property = properties[`zeromem.${key}`];
      assert.deepEqual([...property.type].sort(), ["array", "object", "string"], key);
      assert.deepEqual(property.required, ["regex"], key);
      assert.equal(property.additionalProperties, false, key);
      assert.equal(property.items.type, "string", key);
    }
    for (const key of [...LISTS, ...OBJECTS, ...UNIONS]) {
      const unset = properties[`zeromem.${key}`].default;
      assert.deepEqual(serverSettings({ [key]: unset }), {}, `${key}: the default is sent as unset`);
    }
  });

  it("uses types the Settings UI edits: strings and enums, no null", () => {
    for (const key of SERVER_SETTING_KEYS) {
      if ([...LISTS, ...OBJECTS, ...UNIONS].includes(key)) continue;
      const property = properties[`zeromem.${key}`];
      assert.equal(property.type, "string", key);
      assert.equal(typeof property.default, "string", key);
      if (property.enum) {
        assert.equal(property.enum[0], "default");
        assert.equal(property.default, "default");
        assert.equal(property.enumItemLabels.length, property.enum.length);
      } else {
        assert.equal(property.default, "");
        assert.match("", new RegExp(property.pattern), `${key}: empty must be allowed`);
      }
    }
    const patternOf = (key: string) => new RegExp(properties[`zeromem.${key}`].pattern);
    assert.match("8", patternOf("worldSize"));
    assert.doesNotMatch("0", patternOf("worldSize"));
    assert.match("0.9", patternOf("warnFraction"));
    assert.match("1", patternOf("warnFraction"));
    assert.doesNotMatch("1.5", patternOf("warnFraction"));
    assert.doesNotMatch("0", patternOf("warnFraction"));
  });

  it("offers the settings schema's enums", () => {
    const settingsSchema = JSON.parse(fs.readFileSync(path.join(EXTENSION_ROOT, "schemas", "zeromem-settings.schema.json"), "utf8"));
    for (const [ours, theirs] of [["precision", "precision"], ["optimizer", "optimizer"]]) {
      const serverEnum = settingsSchema.properties[theirs].anyOf.find((choice: { enum?: string[] }) => choice.enum).enum;
      assert.deepEqual(properties[`zeromem.${ours}`].enum.filter((value: unknown) => value !== "default"), serverEnum);
    }
  });
});

describe("copy-schemas (the build)", () => {
  it("fails loudly, writing nothing, when ../../schemas is missing", () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), "zeromem-build-"));
    const extension = path.join(root, "editors", "vscode");
    fs.mkdirSync(path.join(extension, "scripts"), { recursive: true });
    for (const file of ["package.json", path.join("scripts", "copy-schemas.js")]) {
      fs.copyFileSync(path.join(EXTENSION_ROOT, file), path.join(extension, file));
    }
    const run = spawnSync(process.execPath, [path.join(extension, "scripts", "copy-schemas.js")], { encoding: "utf8" });
    assert.equal(run.status, 1);
    assert.match(run.stderr, /copy-schemas: error: .*schemas not found/);
    assert.equal(fs.existsSync(path.join(extension, "schemas")), false);
    fs.rmSync(root, { recursive: true, force: true });
  });
});
