# The agents server image: the same image runs `agents serve` and `agents worker`.
FROM python:3.11-slim
WORKDIR /app
COPY . /app
RUN pip install --no-cache-dir .
EXPOSE 8080
CMD ["agents", "serve", "--bind", "0.0.0.0", "--port", "8080"]
