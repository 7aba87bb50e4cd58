// A real OpenID provider for Vane's sign-in tests: the certified `oidc-provider` package, set up
// here (this file is configuration for the library, not a copy of it). tests/sso/conftest.py
// installs the package with npm and starts this script as
//
//     node tests/sso/provider.mjs '<config as JSON>'
//
// with NODE_PATH pointing at the installed node_modules. The config:
//   clients:     [{client_id, client_secret, redirect_uris, token_endpoint_auth_method?}]
//   accounts:    {"<account id>": {email, email_verified, name, groups?, vane_role?, ...}}
//   idTokenTtl:  seconds an ID token lives (default 600)
//   port:        the port to listen on (default 0: one the system picks)
//
// Each start signs with a new RSA key: a restart on the same port is a key rotation.
//
// It listens on 127.0.0.1 on a port the system picks and prints one line,
// "oidc-provider ready at <issuer>", once it answers.
//
// Signing in needs no browser: the authorization request redirects to /interaction/<uid>, which
// answers with the interaction's details as JSON; POST /interaction/<uid>/login with the form
// field `account` signs that account in and grants the requested scopes (login and consent in
// one step), POST /interaction/<uid>/abort declines (the client gets error=access_denied).
// A browser (a request that accepts text/html) gets a small login page instead of the JSON: a
// form posting the same `account` field to the same /login, with a button to /abort.
import * as crypto from 'node:crypto';
import * as http from 'node:http';
import { createRequire } from 'node:module';
import * as path from 'node:path';

// ESM ignores NODE_PATH: resolve the package from the folder the test installed it in.
const require = createRequire(path.join(process.env.VANE_OIDC_PROVIDER_MODULES, 'noop.js'));
const { default: Provider } = await import(require.resolve('oidc-provider'));

const config = JSON.parse(process.argv[2]);
const accounts = config.accounts;

const { privateKey } = crypto.generateKeyPairSync('rsa', { modulusLength: 2048 });
const signingKey = { ...privateKey.export({ format: 'jwk' }), kid: crypto.randomUUID(), use: 'sig', alg: 'RS256' };

const server = http.createServer();
await new Promise((resolve) => server.listen(config.port ?? 0, '127.0.0.1', resolve));
const issuer = `http://127.0.0.1:${server.address().port}`;

const provider = new Provider(issuer, {
  clients: config.clients.map((client) => ({
    grant_types: ['authorization_code'],
    response_types: ['code'],
    ...client,
  })),
  jwks: { keys: [signingKey] },
  cookies: { keys: [crypto.randomBytes(32).toString('hex')] },
  pkce: { required: () => true },
  // the ID token carries the scopes' claims, as Google's and Keycloak's do for the code flow
  conformIdTokenClaims: false,
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    profile: ['name', 'groups', 'vane_role'],
  },
  features: { devInteractions: { enabled: false } },
  interactions: { url: (_ctx, interaction) => `/interaction/${interaction.uid}` },
  ttl: {
    AccessToken: 600,
    AuthorizationCode: 600,
    IdToken: config.idTokenTtl ?? 600,
    Interaction: 600,
    Session: 3600,
    Grant: 3600,
  },
  async findAccount(_ctx, sub) {
    if (!Object.hasOwn(accounts, sub)) return undefined;
    return { accountId: sub, claims: async () => ({ sub, ...accounts[sub] }) };
  },
});

async function readForm(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
}

function wantsHtml(req) {
  return (req.headers.accept ?? '').includes('text/html');
}

function loginPage(res, uid, params) {
  const client = String(params.client_id).replace(/[^\w.-]/g, '');
  res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-store' });
  res.end(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sign in · test identity provider</title>
<style>body{font:16px system-ui,sans-serif;max-width:24rem;margin:4rem auto}
label,input,button{display:block;margin:.4rem 0}input{box-sizing:border-box;width:100%;padding:.4rem}</style></head>
<body><h1>Test identity provider</h1>
<p>Sign in to continue to <strong>${client}</strong>.</p>
<form method="post" action="/interaction/${uid}/login">
<label for="account">Account</label>
<input id="account" name="account" autocomplete="username" required autofocus>
<button type="submit">Sign in</button>
<button type="submit" formaction="/interaction/${uid}/abort" formnovalidate>Cancel</button>
</form></body></html>`);
}

function answer(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

async function interaction(req, res, uid, action) {
  const details = await provider.interactionDetails(req, res);
  if (details.uid !== uid) return answer(res, 400, { error: 'interaction mismatch' });
  if (req.method === 'GET' && action === undefined) {
    if (wantsHtml(req)) return loginPage(res, uid, details.params);
    return answer(res, 200, { uid, prompt: details.prompt.name, params: details.params });
  }
  if (req.method === 'POST' && action === 'abort') {
    return provider.interactionFinished(req, res, {
      error: 'access_denied',
      error_description: 'The user declined to sign in',
    }, { mergeWithLastSubmission: false });
  }
  if (req.method === 'POST' && action === 'login') {
    const account = (await readForm(req)).get('account');
    if (!account || !Object.hasOwn(accounts, account)) {
      return answer(res, 400, { error: `no account ${account}` });
    }
    const grant = new provider.Grant({ accountId: account, clientId: details.params.client_id });
    grant.addOIDCScope(details.params.scope);
    const grantId = await grant.save();
    return provider.interactionFinished(req, res, {
      login: { accountId: account },
      consent: { grantId },
    }, { mergeWithLastSubmission: false });
  }
  return answer(res, 405, { error: 'not allowed' });
}

const handle = provider.callback();
server.on('request', (req, res) => {
  const match = /^\/interaction\/([^/?]+)(?:\/(login|abort))?(?:\?.*)?$/.exec(req.url);
  if (!match) return handle(req, res);
  interaction(req, res, match[1], match[2]).catch((error) => {
    console.error(error);
    if (!res.headersSent) answer(res, 500, { error: String(error) });
  });
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
console.log(`oidc-provider ready at ${issuer}`);
