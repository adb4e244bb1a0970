#!/usr/bin/env node
// Copy the JSON schemas from the repository's schemas/ folder into ./schemas/, so they ship inside
// the extension (and are committed only once). Every schema that package.json's
// contributes.jsonValidation names must be there: a build without ../../schemas (or with one
// missing) fails here instead of shipping an extension that validates nothing.
"use strict";

const fs = require("fs");
const path = require("path");

const extensionRoot = path.resolve(__dirname, "..");
const source = path.resolve(extensionRoot, "..", "..", "schemas");
const target = path.join(extensionRoot, "schemas");
const manifest = JSON.parse(fs.readFileSync(path.join(extensionRoot, "package.json"), "utf8"));

function fail(message) {
  console.error(`copy-schemas: error: ${message}`);
  process.exit(1);
}

if (!fs.existsSync(source)) {
  fail(`${source} not found: build the extension inside a zeromem-lsp checkout (editors/vscode), ` +
    "whose schemas/ folder `zeromem schema --write schemas` generates");
}

const wanted = new Set(fs.readdirSync(source).filter((name) => name.endsWith(".schema.json")));
const named = (manifest.contributes.jsonValidation ?? [])
  .filter((entry) => entry.url.startsWith("./schemas/"))
  .map((entry) => path.basename(entry.url));
const missing = named.filter((name) => !wanted.has(name));
if (missing.length > 0) {
  fail(`package.json names schemas that ${source} does not have: ${missing.join(", ")}`);
}

fs.rmSync(target, { recursive: true, force: true });
fs.mkdirSync(target, { recursive: true });
for (const name of [...wanted].sort()) {
  const from = path.join(source, name);
  try {
    JSON.parse(fs.readFileSync(from, "utf8")); // refuse to ship a broken schema
  } catch (error) {
    fail(`${from}: ${error.message}`);
  }
  fs.copyFileSync(from, path.join(target, name));
  console.log(`copy-schemas: ${path.relative(extensionRoot, from)} -> schemas/${name}`);
}
