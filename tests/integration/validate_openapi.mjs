// Validates an OpenAPI document with @apidevtools/swagger-parser (the OpenAPI 3.1 schema, then
// its own checks: unique operation ids, path parameters declared, $refs resolved).
// Usage: node validate_openapi.mjs NODE_MODULES_DIR DOCUMENT.json
import { createRequire } from "node:module";
import path from "node:path";

const [modules, document] = process.argv.slice(2);
const require = createRequire(path.join(modules, "noop.js"));
const SwaggerParser = require("@apidevtools/swagger-parser");
try {
  const api = await SwaggerParser.validate(document);
  console.log(JSON.stringify({ valid: true, openapi: api.openapi, paths: Object.keys(api.paths).length }));
} catch (error) {
  console.error(error.message);
  process.exit(1);
}
