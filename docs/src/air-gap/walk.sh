#!/bin/sh
# walk.sh: the air gap from start to finish, as commands. Each "##" heading says where its
# commands run; run them in the directory that holds that site's configuration file.
set -eu

## At the connected site

# This site's bundle-signing key. The public key (site.key.pub, one line "ed25519:...") goes to
# the sealed site by a channel you trust; the private key never leaves this machine.
provender keygen --output /etc/provender/site.key

# The registry's provider signing key: it signs the SHA256SUMS of every published provider.
provender keygen --provider-signing --output /etc/provender/provider-signing.asc

# The mirror itself (a service, in production; see deploy/).
provender serve --config connected.toml &

# CI publishes the organisation's provider: the dist/ directory GoReleaser writes for acme/app.
provender publish provider ./dist --namespace acme --server https://mirror.example.com/ --ca-file /etc/provender/tls/ca.pem --token-file /etc/provender/ci.token

# The team's configuration (infra/ holds main.tf), with its modules installed as terraform
# installs them, straight from the origins: seed follows the modules it calls from there.
terraform -chdir=infra get

# Fill the cache from the configuration itself: its providers, the published one included, its
# registry and git modules, and the terraform CLI.
provender seed --config connected.toml --platform linux_amd64 --platform darwin_arm64 --cli terraform@1.11.4 ./infra

# Everything in the cache, in one signed file.
provender export --config connected.toml --bundle /media/transfer/provender.tar

## Carry the bundle across

# Copy /media/transfer/provender.tar to the sealed site by whatever means your rules allow.

## At the sealed site

# The sealed registry's own provider signing key (it signs nothing imported, but publishing
# needs one).
provender keygen --provider-signing --output /etc/provender/provider-signing.asc

# Ask first: verifies everything, admits nothing, and prints the configuration it needs.
provender import --config sealed.toml --check /media/transfer/provender.tar

provender import --config sealed.toml /media/transfer/provender.tar

provender serve --config sealed.toml &

## On each machine that runs terraform at the sealed site

# Trust the organisation's CA: terraform reads SSL_CERT_FILE, git does not.
export SSL_CERT_FILE=/etc/provender/tls/ca.pem
git config --global http."https://mirror.example.com/".sslCAInfo /etc/provender/tls/ca.pem

# git:: sources from git.example.com through the mirror's git door.
git config --global url."https://mirror.example.com/git/git.example.com/".insteadOf "https://git.example.com/"

# The terraform CLI itself, from the mirror's releases.
curl --fail --cacert /etc/provender/tls/ca.pem -o terraform_1.11.4_linux_amd64.zip https://mirror.example.com/releases/terraform/1.11.4/terraform_1.11.4_linux_amd64.zip

export TF_CLI_CONFIG_FILE=terraform.tfrc
terraform -chdir=infra init
