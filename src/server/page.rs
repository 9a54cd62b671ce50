//! The human page at the mirror's base URL: what this is and how to point the CLI at it.
//! (The protocol never requests the base URL itself, so it is free for documentation.)

/// Renders the page for a mirror reachable at `base_url`.
pub fn render(base_url: &str, hosts: &[String]) -> String {
    let hosts = hosts
        .iter()
        .map(|h| format!("<li><code>{}</code></li>", escape(h)))
        .collect::<String>();
    let url = escape(base_url);
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>provender provider mirror</title>
<style>body{{font-family:system-ui,sans-serif;max-width:44rem;margin:2rem auto;padding:0 1rem;line-height:1.5}}pre{{background:#f4f4f4;padding:1rem;overflow:auto}}</style>
</head><body>
<h1>provender</h1>
<p>This server is a caching mirror for Terraform and OpenTofu providers (the provider network mirror protocol).</p>
<h2>Use it</h2>
<p>Add this to your CLI configuration (<code>~/.terraformrc</code>, <code>%APPDATA%\terraform.rc</code>, <code>~/.tofurc</code>,
or the file named by <code>TF_CLI_CONFIG_FILE</code>):</p>
<pre>provider_installation {{
  network_mirror {{
    url = "{url}"
  }}
}}</pre>
<p>Then run <code>terraform init</code> (or <code>tofu init</code>) as usual.</p>
<h2>Registries served</h2>
<ul>{hosts}</ul>
<h2>Operations</h2>
<p><code>/metrics</code> (Prometheus), <code>/healthz</code>, <code>/readyz</code>.</p>
</body></html>
"#
    )
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
