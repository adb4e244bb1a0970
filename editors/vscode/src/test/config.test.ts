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

  it("describes the command for messages", () => {
    assert.equal(describeCommand(serverCommand({ interpreter: "/My Venv/python" })),
      '"/My Venv/python" -m zeromem_lsp serve');
  });
});

describe("serverSettings", () => {
  it("passes the server's six settings, camelCase, and nothing else", () => {
    const options = serverSettings({
      path: "/x/zeromem", interpreter: "/x/python", trace: { server: "verbose" },
      gpuMemory: "24GiB", parameters: "7B", worldSize: 8, precision: "bf16", optimizer: "adamw", warnFraction: 0.85,
    });
    assert.deepEqual(options, {
      gpuMemory: "24GiB", parameters: "7B", worldSize: 8, precision: "bf16", optimizer: "adamw", warnFraction: 0.85,
    });
  });

  it("leaves out unset values so the server's defaults apply", () => {
    assert.deepEqual(serverSettings({ gpuMemory: "", parameters: null, worldSize: undefined, precision: "  ", warnFraction: NaN }), {});
    assert.deepEqual(serverSettings({ gpuMemory: " 80GiB ", parameters: 8030261248 }), { gpuMemory: "80GiB", parameters: 8030261248 });
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
    assert.match(message, /pip install zeromem-lsp/);
    assert.match(message, /zeromem\.path/);
    assert.match(message, /zeromem\.interpreter/);
  });
  it("points at the setting that chose the command", () => {
    assert.match(startFailureMessage(serverCommand({ path: "/bad" }), "no such executable file"), /Check the setting zeromem\.path/);
    const message = startFailureMessage(serverCommand({ interpreter: "/venv/bin/python" }), "exit code 1");
    assert.match(message, /\/venv\/bin\/python -m pip install zeromem-lsp/);
  });
});

describe("documentSelector", () => {
  it("covers JSON, JSONC and training-config YAML", () => {
    const selector = documentSelector();
    const languages = new Set(selector.map((filter) => filter.language));
    assert.deepEqual([...languages].sort(), ["json", "jsonc", "yaml"]);
    const yaml = selector.find((filter) => filter.language === "yaml");
    assert.ok(yaml?.pattern?.includes("fsdp") && yaml.pattern.includes("accelerate"));
  });
});

describe("package.json", () => {
  const manifest = JSON.parse(fs.readFileSync(path.join(EXTENSION_ROOT, "package.json"), "utf8"));
  const properties = manifest.contributes.configuration.properties;

  it("declares every setting the extension reads and mirrors the server's", () => {
    for (const key of ["path", "interpreter", "gpuMemory", "parameters", "worldSize", "precision", "optimizer", "warnFraction", "trace.server"]) {
      assert.ok(properties[`zeromem.${key}`], `zeromem.${key} missing from contributes.configuration`);
    }
  });

  it("maps the common config names to schemas that the build copied", () => {
    const patterns = manifest.contributes.jsonValidation.flatMap((entry: { fileMatch: string[] }) => entry.fileMatch);
    for (const name of ["ds_config*.json", "*deepspeed*.json", "*zero*.json", "fsdp_config*.json"]) {
      assert.ok(patterns.includes(name), `${name} not in jsonValidation`);
    }
    for (const entry of manifest.contributes.jsonValidation) {
      assert.match(entry.url, /^\.\/schemas\/[\w.-]+\.json$/);
      const file = path.join(EXTENSION_ROOT, entry.url);
      assert.ok(fs.existsSync(file), `${entry.url} not copied (run npm run compile)`);
      JSON.parse(fs.readFileSync(file, "utf8"));
    }
  });

  it("offers the settings schema's enums", () => {
    const settingsSchema = JSON.parse(fs.readFileSync(path.join(EXTENSION_ROOT, "schemas", "zeromem-settings.schema.json"), "utf8"));
    for (const [ours, theirs] of [["precision", "precision"], ["optimizer", "optimizer"]]) {
      const serverEnum = settingsSchema.properties[theirs].anyOf.find((choice: { enum?: string[] }) => choice.enum).enum;
      assert.deepEqual(properties[`zeromem.${ours}`].enum.filter((value: unknown) => value !== null), serverEnum);
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
