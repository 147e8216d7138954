"""RocketMQ's remoting protocol (sans-IO codec); the controller's front is controller/server/remoting.py."""
