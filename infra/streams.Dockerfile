# The streams service's image (template.yaml StreamHost, docs/deployment.md "Fargate option"): the staged artifact
# (scripts/stage_lambda_src.sh, the folder every function is built from) and its locked runtime set, installed as
# `sam build` installs it (hashes required, into the code folder), on the functions' Python (3.12) and arm64.
# tests/ships/test_stream_host_container.py starts the same command from the same folder with the same install.
#
#   bash scripts/stage_lambda_src.sh
#   docker buildx build --platform linux/arm64 -f infra/streams.Dockerfile -t "$REPOSITORY_URI:$TAG" build/lambda-src
#   docker push "$REPOSITORY_URI:$TAG"
FROM public.ecr.aws/docker/library/python:3.12-slim-bookworm
WORKDIR /var/task
COPY requirements.txt ./
RUN pip install --no-cache-dir --require-hashes --only-binary=:all: -r requirements.txt -t /var/task \
    && useradd --uid 1000 --no-create-home --shell /usr/sbin/nologin app
COPY . .
ENV PYTHONPATH=/var/task PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# The task definition runs it as user 1000 with a read-only root file system and /tmp of its own.
USER 1000
EXPOSE 8080
CMD ["functions/agent_api/serve.sh"]
