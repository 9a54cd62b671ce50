# main.tf: the configuration the platform team runs, at both sites alike.

terraform {
  required_providers {
    github = {
      source  = "integrations/github"
      version = "~> 6.0"
    }
    cloudflare = {
      source  = "cloudflare/cloudflare"
      version = "~> 4.0"
    }
    # The organisation's own provider, published to its mirror.
    app = {
      source  = "mirror.example.com/acme/app"
      version = "~> 1.0"
    }
  }
}

# A module from the public registry.
module "network" {
  source  = "terraform-aws-modules/network/aws"
  version = "~> 5.0"
}

# A module straight from the organisation's git server.
module "service" {
  source = "git::https://git.example.com/git/acme/terraform-aws-service.git?ref=v1.2.0"
}
