#!/usr/bin/env node
// Copy the JSON schemas named in package.json's contributes.jsonValidation from the repository's
// schemas/ folder into ./schemas/, so they ship inside the extension (and are committed only once).
// A schema that the repository does not have yet gets a permissive placeholder, so VS Code shows no
// "unable to load schema" error for it.
"use strict";

const fs = require("fs");
const path = require("path");

const extensionRoot = path.resolve(__dirname, "..");
const source = path.resolve(extensionRoot, "..", "..", "schemas");
const target = path.join(extensionRoot, "schemas");
const manifest = JSON.parse(fs.readFileSync(path.join(extensionRoot, "package.json"), "utf8"));

fs.rmSync(target, { recursive: true, force: true });
fs.mkdirSync(target, { recursive: true });

const wanted = new Set();
for (const entry of manifest.contributes.jsonValidation) {
  if (entry.url.startsWith("./schemas/")) wanted.add(path.basename(entry.url));
}
for (const name of fs.existsSync(source) ? fs.readdirSync(source) : []) {
  if (name.endsWith(".schema.json")) wanted.add(name);
}

for (const name of [...wanted].sort()) {
  const from = path.join(source, name);
  const to = path.join(target, name);
  if (fs.existsSync(from)) {
    JSON.parse(fs.readFileSync(from, "utf8")); // refuse to ship a broken schema
    fs.copyFileSync(from, to);
    console.log(`copy-schemas: ${path.relative(extensionRoot, from)} -> schemas/${name}`);
  } else {
    const placeholder = {
      $schema: "http://json-schema.org/draft-07/schema#",
      title: `${name} (not in this build of zeromem: no validation)`,
      type: "object",
    };
    fs.writeFileSync(to, JSON.stringify(placeholder, null, 2) + "\n");
    console.warn(`copy-schemas: warning: ${path.relative(extensionRoot, from)} is missing; wrote a placeholder`);
  }
}
